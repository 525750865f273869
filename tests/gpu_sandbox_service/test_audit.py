from __future__ import annotations

import pytest

from gpu_sandbox_service.audit import audit_source

CLEAN = """
#include "kf_abi.h"
#include <math.h>
// calling system("rm") here is only a comment
/* fopen("x") too */
extern "C" int kf_launch(const kf_tensor *in, int32_t n, kf_tensor *out, int32_t m, void *s) {
  const char *label = "popen(";  // a string is not a call
  int open_count = 0; (void)label; (void)open_count;
  return 0;
}
"""


def test_clean_source_is_custom_and_allowed() -> None:
    report = audit_source(CLEAN, "cpu")
    assert report.allowed and report.audit_class == "custom" and not report.link_libraries


@pytest.mark.parametrize(("snippet", "reason"), [
    ("#include <torch/extension.h>", "forbidden include"),
    ("#include <ATen/ATen.h>", "forbidden include"),
    ("#include <c10/util/Half.h>", "forbidden include"),
    ("system(\"ls\");", "process control"),
    ("FILE *p = popen(\"ls\", \"r\");", "process control"),
    ("pid_t p = fork();", "process control"),
    ("execvp(argv[0], argv);", "process control"),
    ("int s = socket(2, 1, 0);", "network access"),
    ("FILE *f = fopen(\"/etc/passwd\", \"r\");", "file access"),
    ("std::ifstream in(\"x\");", "file access"),
    ("int fd = open (\"/x\", 0);", "file access"),
    ("void *h = dlopen(\"libc.so\", 1);", "dynamic loading"),
    ("const char *k = getenv(\"OPENAI_API_KEY\");", "environment access"),
    ("extern char **environ;", "environment access"),
    ("long r = syscall(39);", "process control"),
])
def test_forbidden_constructs_are_rejected(snippet: str, reason: str) -> None:
    report = audit_source(CLEAN + snippet, "cuda")
    assert not report.allowed
    assert any(reason in v for v in report.violations), report.violations


def test_inline_assembly_is_forbidden_on_cpu_only() -> None:
    source = CLEAN + 'void f() { asm volatile("nop"); }'
    assert not audit_source(source, "cpu").allowed
    assert audit_source(source, "cuda").allowed


def test_vendor_library_calls_make_a_backend_wrapper() -> None:
    report = audit_source(CLEAN + "#include <cublas_v2.h>\nvoid g(cublasHandle_t h) { cublasSgemm(h); }", "cuda")
    assert report.allowed and report.audit_class == "backend_wrapper"
    assert report.link_libraries == ["cublas"]
    assert audit_source(CLEAN + "void g() { cutlass::gemm::device::Gemm<float> op; }", "cuda").audit_class == (
        "backend_wrapper")
