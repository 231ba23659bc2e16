#pragma once
/// glibc's malloc for training loops on the CPU. A step allocates and frees the same large
/// activation buffers every time; above glibc's dynamic mmap threshold (at most 32 MiB) each one is
/// a fresh mmap whose pages fault in again, and free memory at the heap's top is trimmed back to the
/// system. Measured on the LLM workload (bench/llm_cpu.py, 2 cores): 7% of a CPU step's time. Pinning
/// the threshold at 32 MiB and trimming only above 1 GiB keeps those buffers in the heap.
///
/// Call once at the start of main(), before threads start (the `volt` command and the benchmarks
/// do). The MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ environment variables, when set, win
/// (glibc reads them itself). Process-wide; not thread-safe.

namespace volt {

/// Returns true when the settings were applied (glibc, variables unset).
bool tune_malloc_for_training();

}  // namespace volt
