"""textgym.wrap: placeholder until the wrappers land (being written now)."""


def wrap(env, actions=None, formatter=None, **policy):
    raise NotImplementedError("textgym.wrap is being written")
