"""Placeholder until the registry lands (being written now)."""


def register(*args, **kwargs):
    raise NotImplementedError


def make(*args, **kwargs):
    raise NotImplementedError


def make_vec(*args, **kwargs):
    raise NotImplementedError


def list_envs():
    raise NotImplementedError
