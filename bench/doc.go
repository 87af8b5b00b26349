// Package bench holds kdb's crash-recovery and throughput benchmarks. It
// builds stores of a given size once (cached under KDB_BENCH_DIR, default
// $TMPDIR/kdb-bench) and times what the benchmark names, reporting the
// figures with b.ReportMetric.
//
// Run: go test ./bench -run '^$' -bench . -benchtime 3x
//
// The 4 GiB sizes are skipped unless KDB_BENCH_BIG=1: building one writes
// about 12 GiB and takes minutes.
package bench
