"""Numbers below the ops: what an op, a stage or a target needs that is about no op in particular.

``fixed_point`` is the int8 integer arithmetic (the numpy golden model of ``docs/quantization.md``),
``qparams`` the quantization grids tensors carry, ``literals`` the exact C spelling of a number,
and ``text`` the escaping of untrusted names for C, Markdown, XML, CMake and make. It imports only
``tinyc.ir``, ``tinyc.errors`` and ``tinyc.resources``, so ``tinyc.ops`` and every stage above can
use it without an import cycle.
"""
