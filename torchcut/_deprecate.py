"""Renamed keywords: the old name keeps working for a while and warns, naming the new one.

``FutureWarning`` rather than ``DeprecationWarning``: Python shows it by default, also when the call
comes from a library or a notebook cell. The renames are listed in ``CHANGELOG.md``.
"""

from __future__ import annotations

import functools
import warnings

__all__ = ["renamed_keywords"]


def renamed_keywords(_where: str | None = None, **renames):
    """Decorator: accept each old keyword (``old="new"``) as the new one, with a ``FutureWarning``.

    ``_where`` names the function in the messages (default ``name()``). Passing both names raises
    ``TypeError``. The wrapper keeps the function's signature and docstring
    (``inspect.signature`` follows ``__wrapped__``); ``__renamed__`` maps old names to new ones.

    Examples
    --------
    >>> import warnings
    >>> @renamed_keywords(iterations="max_iter")
    ... def fit(x, *, max_iter=5):
    ...     return x * max_iter
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     fit(2, iterations=3)
    6
    >>> str(caught[0].message)
    'fit(): the keyword iterations= is deprecated; use max_iter= (same meaning)'
    """

    def decorate(fn):
        where = _where or f"{fn.__name__}()"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if kwargs:
                for old, new in renames.items():
                    if old in kwargs:
                        if new in kwargs:
                            raise TypeError(f"{where}: got both {old}= (deprecated) and {new}=; pass {new}= only")
                        warnings.warn(
                            f"{where}: the keyword {old}= is deprecated; use {new}= (same meaning)",
                            FutureWarning,
                            stacklevel=2,
                        )
                        kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed__ = dict(renames)
        return wrapper

    return decorate
