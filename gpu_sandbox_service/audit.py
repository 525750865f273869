"""Static audit of a candidate's source: its class, and anything the kernel contract forbids.

The audit is the first line of defence; the isolated process (:mod:`gpu_sandbox_service.isolation`)
is the second, for whatever a pattern cannot see. Patterns run on the source with comments
removed, so a forbidden name in a comment is harmless and one in code is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FORBIDDEN_INCLUDES = re.compile(
    r"#\s*include\s*[<\"]\s*(torch/|ATen/|c10/|caffe2/|Python\.h|pybind11|sys/socket\.h|netinet/|arpa/inet\.h"
    r"|netdb\.h|fstream|dlfcn\.h|spawn\.h|sys/ptrace\.h|sys/syscall\.h)"
)

_FORBIDDEN_CALLS: dict[str, tuple[str, ...]] = {
    "process control": (
        "system", "popen", "fork", "vfork", "clone", "execl", "execlp", "execle", "execv", "execvp", "execve",
        "execvpe", "fexecve", "posix_spawn", "posix_spawnp", "ptrace", "syscall", "kill", "raise_signal",
    ),
    "network access": (
        "socket", "connect", "getaddrinfo", "gethostbyname", "sendto", "recvfrom", "sendmsg", "recvmsg",
        "accept", "listen",
    ),
    "file access": (
        "fopen", "freopen", "fdopen", "open", "openat", "creat", "ifstream", "ofstream", "fstream",
        "unlink", "rmdir", "mkdir", "chmod", "chown", "truncate", "shm_open", "mkstemp", "tmpfile",
    ),
    "dynamic loading": ("dlopen", "dlmopen", "dlsym", "dlvsym"),
    "environment access": ("getenv", "secure_getenv", "environ", "__environ", "setenv", "putenv", "unsetenv"),
}

# Names that are forbidden wherever they appear; every other name only where it is called.
_FORBIDDEN_ANYWHERE = {"ifstream", "ofstream", "fstream", "environ", "__environ"}

_INLINE_ASSEMBLY = re.compile(r"\b(asm|__asm__|__asm)\b")

_BACKEND_LIBRARIES: dict[str, re.Pattern[str]] = {
    "cublasLt": re.compile(r"\bcublasLt\w*"),
    "cublas": re.compile(r"\bcublas(?!Lt)\w*"),
    "cudnn": re.compile(r"\bcudnn\w*"),
    "cutlass": re.compile(r"\bcutlass\b|\bcute::"),
    "cufft": re.compile(r"\bcufft\w*"),
    "curand": re.compile(r"\bcurand(?!_kernel)\w*\s*\("),
    "cusparse": re.compile(r"\bcusparse\w*"),
    "cusolver": re.compile(r"\bcusolver\w*"),
    "mkl": re.compile(r"\bmkl_\w*|#\s*include\s*[<\"]mkl"),
    "cblas": re.compile(r"\bcblas_\w*"),
    "onednn": re.compile(r"\bdnnl\w*"),
}

_LINKED_LIBRARIES = {"cublas": "cublas", "cublasLt": "cublasLt", "cufft": "cufft", "curand": "curand",
                     "cusparse": "cusparse", "cusolver": "cusolver", "cudnn": "cudnn"}

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_STRINGS = re.compile(r'"(?:\\.|[^"\\\n])*"')


@dataclass(frozen=True)
class AuditReport:
    """``audit_class`` is ``custom`` or ``backend_wrapper``; ``violations`` empty means allowed."""

    audit_class: str
    violations: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.violations

    @property
    def link_libraries(self) -> list[str]:
        """Libraries the compiler must link (cuda backend) for the vendor calls found."""
        return [_LINKED_LIBRARIES[name] for name in self.libraries if name in _LINKED_LIBRARIES]


def strip_comments(source: str) -> str:
    """The source without ``//`` and ``/* */`` comments (line structure kept)."""
    return _COMMENTS.sub(lambda m: "\n" * m.group(0).count("\n"), source)


def audit_source(source: str, backend: str) -> AuditReport:
    """Classify ``source`` and list what it may not do under the kernel contract."""
    code = strip_comments(source)
    violations: list[str] = []
    for match in _FORBIDDEN_INCLUDES.finditer(code):
        violations.append(f"line {_line(code, match.start())}: forbidden include <{match.group(1)}...>")
    code_without_strings = _STRINGS.sub('""', code)
    for reason, names in _FORBIDDEN_CALLS.items():
        for match in _forbidden_name_pattern(names).finditer(code_without_strings):
            violations.append(f"line {_line(code_without_strings, match.start())}: {reason}: {match.group(1)}")
    if backend == "cpu":
        for match in _INLINE_ASSEMBLY.finditer(code_without_strings):
            violations.append(f"line {_line(code_without_strings, match.start())}: inline assembly")
    libraries = [name for name, pattern in _BACKEND_LIBRARIES.items() if pattern.search(code_without_strings)]
    audit_class = "backend_wrapper" if libraries else "custom"
    return AuditReport(audit_class, violations, libraries)


def _forbidden_name_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    anywhere = [n for n in names if n in _FORBIDDEN_ANYWHERE]
    called = [n for n in names if n not in _FORBIDDEN_ANYWHERE]
    alternatives = [f"(?:{'|'.join(called)})(?=\\s*\\()"] if called else []
    alternatives += [f"(?:{'|'.join(anywhere)})\\b"] if anywhere else []
    return re.compile(r"(?<![\w.>:])(?:std::|::)?(" + "|".join(alternatives) + ")")


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1
