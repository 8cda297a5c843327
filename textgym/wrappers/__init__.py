"""textgym's Gymnasium wrappers, one concern each.

Stacked inner -> outer as :func:`textgym.wrap` does it::

    base env -> TextObservation -> ParseAction -> EpisodeStats [-> ShapeReward] [-> History]
             [-> RenderText]
"""

from textgym.wrappers.episode_stats import EPISODE_STATS_KEY, EpisodeStats, episode_stats
from textgym.wrappers.history import History
from textgym.wrappers.invalid_answer import (
    DEFAULT_FEEDBACK,
    INVALID_POLICIES,
    RETRY_FALLBACKS,
    AnswerCounter,
    InvalidAnswer,
    InvalidAnswerRule,
    ParseRecord,
    as_answer_text,
)
from textgym.wrappers.parse_action import (
    ActionTable,
    ParseAction,
    env_action_names,
    resolve_actions,
)
from textgym.wrappers.parsers import (
    DEFAULT_REGEX_PATTERNS,
    FunctionParser,
    JSONParser,
    KeywordParser,
    Parser,
    ParserChain,
    ParseResult,
    RegexParser,
    TagParser,
    as_parser,
    default_parser,
)
from textgym.wrappers.render_text import RenderText
from textgym.wrappers.shape_reward import (
    Clip,
    Constant,
    ExponentialDecay,
    FormatBonus,
    LinearDecay,
    Potential,
    RewardFn,
    RewardTerm,
    Scale,
    ShapeReward,
    as_schedule,
)
from textgym.wrappers.text_observation import (
    DEFAULT_SYSTEM_PROMPT,
    Renderer,
    TextObservation,
    describe,
)

__all__ = [
    "DEFAULT_FEEDBACK",
    "DEFAULT_REGEX_PATTERNS",
    "DEFAULT_SYSTEM_PROMPT",
    "EPISODE_STATS_KEY",
    "INVALID_POLICIES",
    "RETRY_FALLBACKS",
    "ActionTable",
    "AnswerCounter",
    "Clip",
    "Constant",
    "EpisodeStats",
    "ExponentialDecay",
    "FormatBonus",
    "FunctionParser",
    "History",
    "InvalidAnswer",
    "InvalidAnswerRule",
    "JSONParser",
    "KeywordParser",
    "LinearDecay",
    "ParseAction",
    "ParseRecord",
    "ParseResult",
    "Parser",
    "ParserChain",
    "Potential",
    "RegexParser",
    "RenderText",
    "Renderer",
    "RewardFn",
    "RewardTerm",
    "Scale",
    "ShapeReward",
    "TagParser",
    "TextObservation",
    "as_answer_text",
    "as_parser",
    "as_schedule",
    "default_parser",
    "describe",
    "env_action_names",
    "episode_stats",
    "resolve_actions",
]
