"""textgym's Gymnasium wrappers, one concern each.

Stacked inner -> outer as :func:`textgym.wrap` does it::

    base env -> TextObservation -> ParseAction -> EpisodeStats [-> ShapeReward] [-> History]
"""

from textgym.wrappers.episode_stats import EpisodeStats
from textgym.wrappers.history import History
from textgym.wrappers.parse_action import DEFAULT_FEEDBACK, INVALID_POLICIES, ParseAction, env_action_names
from textgym.wrappers.parsers import (
    DEFAULT_REGEX_PATTERNS,
    FunctionParser,
    JSONParser,
    KeywordParser,
    Parser,
    ParseResult,
    ParserChain,
    RegexParser,
    as_parser,
    default_parser,
)
from textgym.wrappers.shape_reward import (
    Clip,
    Constant,
    ExponentialDecay,
    FormatBonus,
    LinearDecay,
    RewardFn,
    RewardTerm,
    Scale,
    ShapeReward,
    as_schedule,
)
from textgym.wrappers.text_observation import DEFAULT_SYSTEM_PROMPT, TextObservation, describe

__all__ = [
    "TextObservation", "ParseAction", "EpisodeStats", "ShapeReward", "History",
    "ParseResult", "Parser", "JSONParser", "RegexParser", "KeywordParser", "ParserChain",
    "FunctionParser", "as_parser", "default_parser", "DEFAULT_REGEX_PATTERNS",
    "RewardTerm", "Scale", "Clip", "FormatBonus", "RewardFn",
    "Constant", "LinearDecay", "ExponentialDecay", "as_schedule",
    "describe", "env_action_names", "DEFAULT_SYSTEM_PROMPT", "DEFAULT_FEEDBACK", "INVALID_POLICIES",
]
