"""Every compile in the end-to-end tests is strict: a generated kernel that fails to build, crashes
or disagrees with the reference interpreter (``report.fallbacks``), or a candidate no provider can
run, fails the test instead of being replaced silently by a library kernel. A test that expects a
fallback passes ``strict=False`` and asserts the exact fallbacks itself."""

import pytest

from kernorch.runtime import compile as compile_module


@pytest.fixture(autouse=True)
def strict_compiles(monkeypatch):
    real = compile_module.compile

    def strict(*args, **kwargs):
        if kwargs.get("options") is None:
            kwargs.setdefault("strict", True)
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_module, "compile", strict)
