"""Parsers: real LLM-style answers -> the right action; total, bounded, composable."""

from __future__ import annotations

import json
import re
import string
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textgym.wrappers.parsers import (
    FunctionParser,
    JSONParser,
    KeywordParser,
    Parser,
    ParserChain,
    ParseResult,
    RegexParser,
    TagParser,
    _normalize,
    as_parser,
    default_parser,
)

LR = ["LEFT", "RIGHT"]
TAXI = ["SOUTH", "NORTH", "EAST", "WEST", "PICKUP", "DROPOFF"]

# (answer, action names, expected name or None, expected parser or None)
ANSWERS = [
    # JSON, bare, fenced, in prose, nested, case-insensitive, by index
    ('{"action": "LEFT"}', LR, "LEFT", "json"),
    ('```json\n{\n  "action": "RIGHT"\n}\n```', LR, "RIGHT", "json"),
    ('The pole leans right, so I push right.\n\n{"action": "RIGHT"}', LR, "RIGHT", "json"),
    ('{"thought": "the pole is falling to the left", "action": "left"}', LR, "LEFT", "json"),
    ('{"ACTION": "Right"}', LR, "RIGHT", "json"),
    ('{ "Action" : " right " }', LR, "RIGHT", "json"),
    ('{"action": 0}', LR, "LEFT", "json"),
    ('{"action": "1"}', LR, "RIGHT", "json"),
    ('Sure! Here is my answer: {"action": "RIGHT"}. Let me know if you need more.', LR, "RIGHT", "json"),
    ('{"response": {"reasoning": "...", "action": "LEFT"}}', LR, "LEFT", "json"),
    ('For example {"action": "LEFT"}. My answer: {"action": "RIGHT"}', LR, "RIGHT", "json"),
    ('{"action": "LEFT", "action": "RIGHT"}', LR, "RIGHT", "json"),  # duplicate key: JSON keeps the last
    ('{"move": "north"}', TAXI, "NORTH", "json"),
    ('I will pick up the passenger.\n```json\n{"action": "PICKUP"}\n```', TAXI, "PICKUP", "json"),
    # a prefilled '{"action": "' answer stopped at its closing quote, at a comma, by the length limit
    ('{"action": "RIGHT"', LR, "RIGHT", "json"),
    ('{"action": "left",', LR, "LEFT", "json"),
    ('{"action": "LEFT', LR, "LEFT", "json"),
    ('{"action": "RIGHT"} {"action": "LEFT', LR, "LEFT", "json"),
    # an answer tag after free reasoning: the last tag decides, whatever the reasoning mentions
    ("<answer>LEFT</answer>", LR, "LEFT", "answer"),
    ("Pushing RIGHT tips it. <answer> left </answer> then RIGHT", LR, "LEFT", "answer"),
    ("<answer>RIGHT</answer> no, <ANSWER>LEFT", LR, "LEFT", "answer"),
    ("LEFT is bad. <answer>I push right</answer>", LR, "RIGHT", "answer"),
    # regex
    ("Action: RIGHT", LR, "RIGHT", "regex"),
    ("**Action:** LEFT", LR, "LEFT", "regex"),
    ("Action: **RIGHT**", LR, "RIGHT", "regex"),
    ("action = right", LR, "RIGHT", "regex"),
    ("Action -> LEFT", LR, "LEFT", "regex"),
    ("Action: LEFT (pushing RIGHT would make it fall)", LR, "LEFT", "regex"),
    ("I choose RIGHT because LEFT would tip the pole over.", LR, "RIGHT", "regex"),
    ("Thinking... the cart drifts right.\nFinal answer: LEFT", LR, "LEFT", "regex"),
    ('The answer is "RIGHT".', LR, "RIGHT", "regex"),
    ("The best move is left, since right is risky", LR, "LEFT", "regex"),
    ("{'action': 'LEFT'}", LR, "LEFT", "regex"),  # a Python dict is not JSON
    ("I'll go north to reach the passenger; south is a wall.", TAXI, "NORTH", "regex"),
    ("Action: dropoff", TAXI, "DROPOFF", "regex"),
    ("Action: 2", ["0", "1", "2"], "2", "regex"),
    # keyword: the last whole-word mention
    ("RIGHT", LR, "RIGHT", "keyword"),
    ("right.", LR, "RIGHT", "keyword"),
    ("  left\n", LR, "LEFT", "keyword"),
    ("Hmm, left or right? Definitely right!", LR, "RIGHT", "keyword"),
    ("LEFT RIGHT LEFT", LR, "LEFT", "keyword"),
    ("Push the cart to the LEFT.", LR, "LEFT", "keyword"),
    ("east", TAXI, "EAST", "keyword"),
    # nothing
    ("", LR, None, None),
    ("I cannot decide.", LR, None, None),
    ("leftist rightward", LR, None, None),
    ('{"action": "JUMP"}', LR, None, None),
    ('{"action": "JUMP"', LR, None, None),
    ("<answer>JUMP</answer>", LR, None, None),
    ("\x00\x01\x02\x1b[31m", LR, None, None),
    ("🙂 " * 50, LR, None, None),
]


@pytest.mark.parametrize("text,names,expected,parser", ANSWERS)
def test_default_chain_parses_llm_answers(text, names, expected, parser):
    result = default_parser()(text, names)
    if expected is None:
        assert result is None
    else:
        assert result is not None, text
        assert result.action_name == expected
        assert result.action_index == names.index(expected)
        assert result.parser == parser


def test_json_wrong_types_are_no_match():
    p = JSONParser()
    for text in ['{"action": ["LEFT"]}', '{"action": null}', '{"action": true}', '{"action": 5}',
                 '{"action": -1}', '{"action": 1.0}', '{"action": {"name": "LEFT"}}', '{"action": "LEFT" x',
                 '{"action": "LEFT is good', "{action: LEFT}", '["LEFT"]', '"LEFT"', "{", "}{", "{}"]:
        assert p(text, LR) is None, text
    # ... and the chain still never raises on them
    chain = default_parser()
    for text in ['{"action": ["LEFT"]}', '{"action": null} so RIGHT', '{"action": {"$ref": 1}}']:
        result = chain(text, LR)
        assert result is None or result.action_name in LR


def test_adversarial_numbers_and_nesting():
    digits = [str(i) for i in range(3)]
    for text in ['{"action": ' + "9" * 5000 + "}", '{"action": "' + "9" * 5000 + '"}',
                 "Action: " + "1" * 5000, '{"action": 1e400}', '{"action": NaN}']:
        assert default_parser()(text, LR) is None, text[:30]
        assert default_parser()(text, digits) is None, text[:30]
    # an object too deep for the decoder is skipped; the regex still reads its action
    deep = '{"action": "LEFT", "x": ' + "[" * 100_000 + "}"
    assert JSONParser()(deep, LR) is None
    assert default_parser()(deep, LR).action_name == "LEFT"


def test_json_closes_only_the_answer_s_last_object():
    # an unterminated object before the last one is not guessed at
    assert JSONParser()('{"action": "LEFT" and then {"note": 1}', LR) is None
    assert JSONParser()('{"action": "LEFT" and then {"action": "RIGHT"}', LR).action_name == "RIGHT"
    assert JSONParser()('{"action": "RIGHT"   \n', LR).action_name == "RIGHT"


def test_tag_parser_names_and_bounds():
    assert TagParser(tag="move")("<move>north</move>", TAXI).action_name == "NORTH"
    assert TagParser()("<answer></answer>", LR) is None
    assert TagParser()("<answer>" + "x" * 1000 + " LEFT", LR).action_name == "LEFT"
    assert TagParser()("<answer>" + "x" * 10_000 + " LEFT", LR) is None  # the tag is beyond max_chars
    with pytest.raises(ValueError, match="tag name"):
        TagParser(tag="a>b")


def test_json_last_object_with_an_action_decides():
    assert JSONParser()('{"action": "LEFT"} {"note": 1}', LR).action_name == "LEFT"
    # the last object with an action key names an unknown action: no JSON match
    assert JSONParser()('{"action": "LEFT"} {"action": "JUMP"}', LR) is None


def test_numeric_names_win_over_indices():
    names = ["-1", "0", "1"]  # e.g. Discrete(3, start=-1)
    assert JSONParser()('{"action": -1}', names).action_index == 0
    assert JSONParser()('{"action": 1}', names).action_index == 2
    assert default_parser()("Action: -1", names).action_index == 0
    assert KeywordParser()("I pick 0", names).action_index == 1


def test_a_number_that_is_not_a_listed_numeric_name_is_no_index():
    # the legal squares of a board: "5" is taken, so it is not listed; it must not mean index 5
    legal = ["1", "2", "3", "4", "6", "7", "8", "9"]
    assert JSONParser()('{"action": "5"}', legal) is None
    assert JSONParser()('{"action": 5}', legal) is None
    assert JSONParser()('{"action": 6}', legal).action_name == "6"
    assert JSONParser()('{"action": 1}', ["LEFT", "RIGHT"]).action_name == "RIGHT"  # words: an index


def test_multi_word_and_combination_names():
    names = ["move north", "move south", "stay"]
    assert default_parser()('{"action": "Move North"}', names).action_name == "move north"
    assert default_parser()("Action: MOVE-SOUTH", names).action_name == "move south"
    assert default_parser()("I'll move_north now", names).action_name == "move north"
    combos = ["NONE", "UP", "FIRE", "UP+FIRE"]
    assert default_parser()("UP+FIRE", combos).action_name == "UP+FIRE"
    assert default_parser()("Action: up+fire", combos).action_name == "UP+FIRE"
    assert default_parser()("just FIRE", combos).action_name == "FIRE"
    # the longer name wins when both end at the same place
    assert KeywordParser()("go move north", ["north", "move north"]).action_name == "move north"


def test_keyword_is_last_whole_word_case_insensitive():
    p = KeywordParser()
    assert p("Left looks bad, so RIGHT.", LR).action_name == "RIGHT"
    assert p("rightmost left", LR).action_name == "LEFT"
    assert p("leftleft", LR) is None
    assert p("LEFT_RIGHT", LR) is None  # underscore joins words


def test_regex_custom_patterns():
    p = RegexParser([r"<act>(\w+)</act>"])
    assert p("<act>right</act> <act>left</act>", LR).action_name == "LEFT"
    p = RegexParser([r"option (?P<action>\d)"])
    assert p("option 1", LR).action_name == "RIGHT"  # a captured number is an index
    p = RegexParser(["pick=(?P<action>{actions})"])
    assert p("PICK=Left", LR).action_name == "LEFT"
    with pytest.raises(re.error):
        RegexParser(["(unclosed"])


def test_user_parsers_compose():
    class LastWord(Parser):
        name = "last-word"

        def __call__(self, text, action_names):
            words = text.split()
            if words and words[-1] in action_names:
                i = list(action_names).index(words[-1])
                return ParseResult(i, action_names[i], self.name)
            return None

    def arrow(text, names):
        return {"<-": "LEFT", "->": "RIGHT"}.get(text.strip())

    chain = ParserChain([arrow, LastWord(), KeywordParser()])
    assert chain("->", LR) == ParseResult(1, "RIGHT", "arrow")
    assert chain("x RIGHT", LR).parser == "last-word"
    assert chain("right then", LR).parser == "keyword"
    assert chain("nothing", LR) is None
    assert as_parser(None)("Action: LEFT", LR).parser == "regex"
    assert isinstance(as_parser([arrow]), ParserChain)
    assert FunctionParser(lambda t, n: 1, name="one")("", LR).action_name == "RIGHT"
    assert FunctionParser(lambda t, n: 7)("", LR) is None  # out of range
    with pytest.raises(TypeError):
        as_parser(42)
    with pytest.raises(ValueError):
        ParserChain([])


# --------------------------------------------------------------------------- 1 MB answers

HUGE = [
    '{"a":"' * 200_000,  # unterminated strings everywhere
    "{" * 1_000_000,
    '{"action": ' * 100_000,
    "left" * 250_000,  # no whole-word mention
    "action" + " " * 1_000_000,
    "action: " * 150_000,
    "é" * 1_000_000,
    "\x00" * 1_000_000,
    "[" * 500_000 + "]" * 500_000,
    '{"x": [' * 50_000 + "1" + "]}" * 50_000,  # deep nesting
    "x " * 500_000 + "RIGHT",
    "<answer>" * 100_000,
    "<answer>" + "left" * 250_000,
]


@pytest.mark.parametrize("text", HUGE, ids=[f"huge{i}" for i in range(len(HUGE))])
def test_one_megabyte_answers_are_bounded(text):
    # Not a speed test (bench/ measures speed): a catastrophic regex backtrack on these
    # inputs runs for hours, so a bound this loose only catches that, even on a loaded machine.
    start = time.perf_counter()
    for parser in (JSONParser(), TagParser(), RegexParser(), KeywordParser(), default_parser()):
        result = parser(text, LR)
        assert result is None or result.action_name in LR
    assert time.perf_counter() - start < 60.0


def test_one_megabyte_answer_still_parses_its_action():
    text = "blah " * 200_000 + '```json\n{"action": "RIGHT"}\n```'
    assert default_parser()(text, LR).parser == "json"
    assert default_parser()("x" * 1_000_000 + " Action: LEFT", LR).action_name == "LEFT"


# --------------------------------------------------------------------------- properties

_name_chars = string.ascii_letters + string.digits + " _-+"
names_strategy = st.lists(
    st.text(_name_chars, min_size=1, max_size=12).filter(lambda s: s.strip() and _normalize(s)),
    min_size=1, max_size=8,
).filter(lambda ns: len({_normalize(n) for n in ns}) == len(ns) and len(set(ns)) == len(ns))

fragments = st.sampled_from(['{', '}', '"action"', '"Action"', ':', '"LEFT"', '"RIGHT"', "LEFT", "right",
                             "0", "1", "-1", "```json", "```", "\n", " ", "Action: ", "**", "null",
                             "[", "]", ",", "'", "\\", "\x00", "é", "🙂", "choose ", "is "])
answers = st.one_of(st.text(max_size=300), st.lists(fragments, max_size=40).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=answers, names=st.one_of(st.just(LR), st.just(TAXI), names_strategy))
def test_parsers_never_raise_and_return_a_valid_index(text, names):
    for parser in (JSONParser(), TagParser(), RegexParser(), KeywordParser(), default_parser()):
        result = parser(text, names)
        if result is not None:
            assert isinstance(result.action_index, int)
            assert 0 <= result.action_index < len(names)
            assert result.action_name == names[result.action_index]
            assert result.parser == parser.name or isinstance(parser, ParserChain)


prose = st.text(alphabet=st.characters(blacklist_characters="{}", blacklist_categories=("Cs",)), max_size=80)


@settings(max_examples=200, deadline=None)
@given(names=names_strategy, data=st.data(), before=prose, after=prose,
       fenced=st.booleans(), indent=st.sampled_from([None, 2]))
def test_json_round_trip(names, data, before, after, fenced, indent):
    i = data.draw(st.integers(0, len(names) - 1))
    blob = json.dumps({"thought": before[:20], "action": names[i]}, indent=indent)
    if fenced:
        blob = f"```json\n{blob}\n```"
    text = f"{before}\n{blob}\n{after}"
    assert JSONParser()(text, names).action_index == i
    assert default_parser()(text, names).action_index == i


@settings(max_examples=100, deadline=None)
@given(names=st.lists(st.text(string.ascii_letters, min_size=1, max_size=8), min_size=1, max_size=6, unique_by=str.lower),
       data=st.data(), before=st.text(string.digits + " .,!?\n", max_size=60))
def test_json_index_round_trip(names, data, before):
    i = data.draw(st.integers(0, len(names) - 1))
    assert JSONParser()(before + json.dumps({"action": i}), names).action_index == i


@settings(max_examples=150, deadline=None)
@given(names=st.lists(st.text(string.ascii_letters, min_size=1, max_size=8), min_size=1, max_size=6, unique_by=str.lower),
       data=st.data(), before=st.text(string.digits + " .,!?\n", max_size=60),
       after=st.text(string.digits + " .,!?\n", max_size=60))
def test_keyword_finds_the_last_mention(names, data, before, after):
    i = data.draw(st.integers(0, len(names) - 1))
    j = data.draw(st.integers(0, len(names) - 1))
    text = f"{before} {names[j].upper()} {before} {names[i].swapcase()} {after}"
    assert KeywordParser()(text, names).action_index == i


def test_answer_text_is_the_answer_s_own_words():
    from textgym.wrappers.parsers import answer_text

    assert answer_text('{"action": "take the key from the box"}') == "take the key from the box"
    assert answer_text('{"action": "open box",') == "open box"
    assert answer_text("I will go. <answer> go west </answer>") == "go west"
    assert answer_text('{"action": 3}') is None and answer_text("just words") is None
    assert answer_text('{"note": "x"} <answer>look') == "look"
