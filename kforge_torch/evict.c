/* Evicts address ranges from every level of the CPU's caches, written back first where dirty.
 *
 * The CPU timer's cold start for one call: the call's operands leave the caches line by line,
 * which costs what the operands weigh, where writing a buffer twice the last-level cache costs
 * what the cache weighs (tens of milliseconds per call on a server part). */
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
/* The smallest cache line of any x86 part; a larger real line is only flushed more than once. */
static size_t line_bytes(void) { return 64; }
/* clflushopt where the part has it (CPUID.7.0:EBX bit 23): clflush is ordered against every
 * other flush, about 175 ns a line on a server part where clflushopt pipelines at 5-10 ns. */
static int has_clflushopt(void) {
    unsigned int a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23));
}
__attribute__((target("clflushopt"))) static void evict_lines_opt(uintptr_t first, uintptr_t end, size_t step) {
    for (uintptr_t line = first; line < end; line += step) _mm_clflushopt((void *)line);
}
static void evict_lines(uintptr_t first, uintptr_t end, size_t step) {
    static int opt = -1;
    if (opt < 0) opt = has_clflushopt();
    if (opt) {
        evict_lines_opt(first, end, step);
        return;
    }
    for (uintptr_t line = first; line < end; line += step) _mm_clflush((const void *)line);
}
static void fence(void) { _mm_mfence(); }
#elif defined(__aarch64__)
/* CTR_EL0.DminLine: log2 of the words in the smallest data cache line of the system. */
static size_t line_bytes(void) {
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    return (size_t)4 << ((ctr >> 16) & 0xF);
}
static void evict_lines(uintptr_t first, uintptr_t end, size_t step) {
    for (uintptr_t line = first; line < end; line += step) __asm__ volatile("dc civac, %0" : : "r"(line) : "memory");
}
static void fence(void) { __asm__ volatile("dsb ish" : : : "memory"); }
#else
#error "no cache-line eviction instruction known for this architecture"
#endif

void kf_evict(const void *start, size_t bytes) {
    const size_t step = line_bytes();
    evict_lines((uintptr_t)start & ~(uintptr_t)(step - 1), (uintptr_t)start + bytes, step);
    fence();
}
