"""ScopeStack: seed 003's stack of scopes for block inheritance.

The bottom of the stack is the global scope (the segment's root unless
another is given); push_stack() pushes an anonymous child of the current
scope, pop_stack() releases it.  Variables go to the current scope,
parameters to the global scope, labelled "parameter", so that an optimizer can
enlist them with global_scope().vars(label="parameter").
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Optional

from ._pdshm import Scope, Segment, Var

PARAMETER = "parameter"


class ScopeStack:
    """A stack of scopes: the global scope at the bottom, block scopes above."""

    def __init__(self, seg: Segment, global_scope: Optional[Scope] = None) -> None:
        """The stack holds the global scope only: seg.root unless given.
        TypeError unless seg is a Segment and global_scope a Scope or None."""
        if not isinstance(seg, Segment):
            raise TypeError(f"ScopeStack needs a pdshm.Segment, not {type(seg).__name__}")
        if global_scope is not None and not isinstance(global_scope, Scope):
            raise TypeError(f"global_scope must be a pdshm.Scope, not {type(global_scope).__name__}")
        self._seg = seg
        self._scopes: List[Scope] = [global_scope if global_scope is not None else seg.root]

    def push_stack(self) -> Scope:
        """Pushes and returns a new anonymous child of the current scope."""
        s = self.cur_scope().new_scope()
        self._scopes.append(s)
        return s

    def pop_stack(self) -> None:
        """Pops the current scope and releases it (with its variables, unless
        someone else holds it).  IndexError when only the global scope is left."""
        if len(self._scopes) == 1:
            raise IndexError("pop_stack: only the global scope is left")
        self._scopes.pop().release()

    def cur_scope(self) -> Scope:
        """The scope on top of the stack."""
        return self._scopes[-1]

    def global_scope(self) -> Scope:
        """The scope at the bottom of the stack."""
        return self._scopes[0]

    def __len__(self) -> int:
        """How many scopes are on the stack (1: the global scope only)."""
        return len(self._scopes)

    @contextlib.contextmanager
    def sub_block(self) -> Iterator[Scope]:
        """`with stack.sub_block() as s:` pushes a block scope and pops it at exit."""
        s = self.push_stack()
        try:
            yield s
        finally:
            if self._scopes and self._scopes[-1] is s:
                self.pop_stack()

    def _name(self, name: Optional[str], prefix: Optional[str]) -> str:
        if name is not None:
            return name
        return self._seg.unique_name(prefix if prefix is not None else "unknown")

    def new_variable(self, name: Optional[str] = None, prefix: Optional[str] = None) -> Var:
        """Creates a variable in the current scope: NAME, or "prefix-N" (prefix
        "unknown" by default) unique across the segment.  Exists when the
        current scope already has that name."""
        return self.cur_scope().create_var(self._name(name, prefix))

    def new_parameter(self, name: Optional[str] = None, prefix: Optional[str] = None) -> Var:
        """Creates a variable labelled "parameter" in the global scope, named as
        new_variable names."""
        v = self.global_scope().create_var(self._name(name, prefix))
        v.label = PARAMETER
        return v
