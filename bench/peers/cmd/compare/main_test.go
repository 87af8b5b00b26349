package main

import (
	"strings"
	"testing"
)

const sample = `# kdb: abc1234
BenchmarkPeers/workload=write-1/engine=kdb-2         	    2000	    100000 ns/op	      10000 ops/s
BenchmarkPeers/workload=write-1/engine=bbolt-2       	    2000	    400000 ns/op	      2500 ops/s
BenchmarkPeers/workload=write-16/engine=kdb-2        	    2000	     50000 ns/op	     20000 ops/s
BenchmarkPeers/workload=write-16/engine=pebble-2     	    2000	     40000 ns/op	     25000 ops/s
BenchmarkPeers/workload=get/engine=kdb-2             	  100000	      2300 ns/op
BenchmarkPeers/workload=get/engine=bbolt-2           	  100000	      2000 ns/op
BenchmarkPeers/workload=open-after-crash-4GiB/engine=kdb-2         	       3	   1000000 ns/op	      5534 MiB	         0 pages-scanned/op	 0.5 recovery-ms/op
BenchmarkPeers/workload=open-after-crash-4GiB/engine=kdb-scan-2    	       3	 150000000 ns/op	      5534 MiB	    1000000 pages-scanned/op	 150 recovery-ms/op
BenchmarkPeers/workload=open-after-crash-4GiB/engine=bbolt-2       	       3	    900000 ns/op	      4631 MiB
`

func TestParse_EnginesAndMetrics(t *testing.T) {
	res := parse([]byte(sample))
	r, ok := res["open-after-crash-4GiB"]["kdb-scan"]
	if !ok {
		t.Fatalf("kdb-scan not parsed (kdb-scan must not be read as kdb): %v", res["open-after-crash-4GiB"])
	}
	if r.metrics["ns/op"] != 150000000 || r.metrics["pages-scanned/op"] != 1000000 || r.metrics["MiB"] != 5534 {
		t.Fatalf("metrics %v", r.metrics)
	}
	if got := res["write-1"]["kdb"].metrics["ops/s"]; got != 10000 {
		t.Fatalf("write-1 kdb ops/s = %v", got)
	}
}

func TestParse_MedianOfCount(t *testing.T) {
	raw := "BenchmarkPeers/workload=get/engine=kdb-2 10 3000 ns/op\n" +
		"BenchmarkPeers/workload=get/engine=kdb-2 10 1000 ns/op\n" +
		"BenchmarkPeers/workload=get/engine=kdb-2 10 2000 ns/op\n"
	if got := parse([]byte(raw))["get"]["kdb"].metrics["ns/op"]; got != 2000 {
		t.Fatalf("median = %v, want 2000", got)
	}
}

func TestTargetTable_MetAndMissed(t *testing.T) {
	tt := targetTable(parse([]byte(sample)))
	rows := map[string]string{}
	for _, l := range strings.Split(tt, "\n") {
		for _, tg := range targets {
			if strings.HasPrefix(l, "| "+tg.text+" |") {
				rows[tg.text] = l
			}
		}
	}
	want := []struct {
		text, status, figure string
	}{
		{targets[0].text, "**met**", "150.0x"},    // 150 ms / 1 ms
		{targets[1].text, "**missed**", "= 1.11"}, // 1 ms / 0.9 ms
		{targets[2].text, "**missed**", "4.00x"},  // 10000 / 2500, want 5x
		{targets[3].text, "**met**", "4.00x"},     // the same, want 2x
		{targets[4].text, "**missed**", "0.80x"},  // 20000 / 25000
		{targets[5].text, "**met**", "= 1.15"},    // 2.3 / 2.0
	}
	for _, w := range want {
		l, ok := rows[w.text]
		if !ok {
			t.Fatalf("no row for %q in\n%s", w.text, tt)
		}
		if !strings.Contains(l, w.status) || !strings.Contains(l, w.figure) {
			t.Errorf("row %q: want %s and %s", l, w.status, w.figure)
		}
	}
}

func TestTargetTable_NotRun(t *testing.T) {
	raw := "BenchmarkPeers/workload=open-after-crash-1GiB/engine=kdb-2 3 1000000 ns/op\n" +
		"BenchmarkPeers/workload=open-after-crash-1GiB/engine=kdb-scan-2 3 50000000 ns/op\n"
	tt := targetTable(parse([]byte(raw)))
	if strings.Contains(tt, "**met**") || strings.Contains(tt, "**missed**") {
		t.Fatalf("a target judged without its workload:\n%s", tt)
	}
	if !strings.Contains(tt, "at 1 GiB: kdb-scan ÷ kdb time = 50.0x") {
		t.Fatalf("no 1 GiB figure for the 4 GiB target:\n%s", tt)
	}
}

func TestFailures_ListsFailedBenchmarks(t *testing.T) {
	raw := "BenchmarkPeers/workload=get/engine=kdb-2 10 3000 ns/op\n" +
		"--- FAIL: BenchmarkPeers/workload=open-after-crash-4GiB/engine=kdb\n" +
		"    peers_test.go:1: kdb: free list scanned (ids differ), 5 pages scanned\n" +
		"FAIL\n" +
		"ok  \tgithub.com/kdb-project/kdb/bench/peers\n"
	got := failures([]byte(raw))
	want := "--- FAIL: BenchmarkPeers/workload=open-after-crash-4GiB/engine=kdb\n" +
		"    peers_test.go:1: kdb: free list scanned (ids differ), 5 pages scanned\n"
	if got != want {
		t.Fatalf("failures:\n%q\nwant\n%q", got, want)
	}
	if failures([]byte(sample)) != "" {
		t.Fatal("failures in a run without any")
	}
}
