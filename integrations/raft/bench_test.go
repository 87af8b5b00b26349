package raftkdb

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	raftbench "github.com/hashicorp/raft/bench"
)

// benchStore is a LogStore and StableStore under test, fresh for each
// benchmark, in a directory of its own on the real file system.
type benchStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// The stores compared, all at the same durability: each acknowledged write
// is on disk. kdb: SyncAlways (its default; one fdatasync per write, shared
// by concurrent writers). raft-boltdb: its default, bbolt's fsync on every
// commit (NoSync false). raft-wal: its default, an fsync of the segment file
// on every append (it has no option to turn that off).
var benchStores = []struct {
	name string
	open func(b *testing.B, dir string) benchStore
}{
	{"kdb", func(b *testing.B, dir string) benchStore {
		s, err := Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"boltdb", func(b *testing.B, dir string) benchStore {
		s, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"wal", func(b *testing.B, dir string) benchStore {
		s, err := wal.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		return shifted{s}
	}},
}

// shifted adds one to every index on the way into raft-wal and takes it off
// on the way out: raft's StoreLog helper starts at index 0, which raft-wal
// refuses (its first index is 1), so without it raft-wal cannot run that
// helper. The work per call is the same. raft-wal also refuses gaps, which
// the DeleteRange helper writes (3 entries every 10 indexes): that one is
// not run for raft-wal.
type shifted struct{ *wal.WAL }

func (s shifted) FirstIndex() (uint64, error) {
	i, err := s.WAL.FirstIndex()
	if i > 0 {
		i--
	}
	return i, err
}

func (s shifted) LastIndex() (uint64, error) {
	i, err := s.WAL.LastIndex()
	if i > 0 {
		i--
	}
	return i, err
}

func (s shifted) GetLog(index uint64, l *raft.Log) error {
	if err := s.WAL.GetLog(index+1, l); err != nil {
		return err
	}
	l.Index--
	return nil
}

func (s shifted) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s shifted) StoreLogs(logs []*raft.Log) error {
	c := make([]*raft.Log, len(logs))
	for i, l := range logs {
		e := *l
		e.Index++
		c[i] = &e
	}
	return s.WAL.StoreLogs(c)
}

func (s shifted) DeleteRange(lo, hi uint64) error { return s.WAL.DeleteRange(lo+1, hi+1) }

// BenchmarkStores runs hashicorp/raft's own bench helpers against kdb,
// raft-boltdb/v2 and raft-wal in one run, so that their ratios are measured
// side by side on the same machine at the same moment:
//
//	go test -run XXX -bench Stores -count 5 .
func BenchmarkStores(b *testing.B) {
	logBenches := []struct {
		name string
		fn   func(*testing.B, raft.LogStore)
	}{
		{"FirstIndex", raftbench.FirstIndex},
		{"LastIndex", raftbench.LastIndex},
		{"GetLog", raftbench.GetLog},
		{"StoreLog", raftbench.StoreLog},
		{"StoreLogs", raftbench.StoreLogs},
		{"DeleteRange", raftbench.DeleteRange},
	}
	stableBenches := []struct {
		name string
		fn   func(*testing.B, raft.StableStore)
	}{
		{"Set", raftbench.Set},
		{"Get", raftbench.Get},
		{"SetUint64", raftbench.SetUint64},
		{"GetUint64", raftbench.GetUint64},
	}
	// Interleaved by benchmark, so that each comparison runs at nearly the
	// same moment on a noisy machine.
	for _, lb := range logBenches {
		for _, st := range benchStores {
			if lb.name == "DeleteRange" && st.name == "wal" {
				continue // raft-wal refuses the helper's gaps (see shifted)
			}
			b.Run(lb.name+"/"+st.name, func(b *testing.B) {
				s := st.open(b, b.TempDir())
				defer s.Close()
				lb.fn(b, s)
			})
		}
	}
	for _, sb := range stableBenches {
		for _, st := range benchStores {
			b.Run(sb.name+"/"+st.name, func(b *testing.B) {
				s := st.open(b, b.TempDir())
				defer s.Close()
				sb.fn(b, s)
			})
		}
	}
}

// TestStoreBenchTable runs the same helpers through testing.Benchmark in
// interleaved rounds (each round: every helper for kdb, raft-boltdb and
// raft-wal, one after the other) and prints a markdown table of ns/op
// (median and range over the rounds) and of the per-round ratios, the
// table of the README:
//
//	KDB_RAFT_BENCH=1 go test -run StoreBenchTable -v -timeout 30m .
//
// KDB_RAFT_BENCH_ROUNDS sets the rounds (default 12), KDB_RAFT_BENCHTIME
// the time of each run (default 300ms).
func TestStoreBenchTable(t *testing.T) {
	if os.Getenv("KDB_RAFT_BENCH") == "" {
		t.Skip("benchmark: set KDB_RAFT_BENCH=1")
	}
	rounds := 12
	if r, err := strconv.Atoi(os.Getenv("KDB_RAFT_BENCH_ROUNDS")); err == nil && r > 0 {
		rounds = r
	}
	// Short runs, many rounds: the disk's fsync latency drifts over
	// seconds on a shared machine, so the finer the interleaving, the less
	// the drift falls between two stores of one comparison.
	benchtime := "300ms"
	if v := os.Getenv("KDB_RAFT_BENCHTIME"); v != "" {
		benchtime = v
	}
	if err := flag.Set("test.benchtime", benchtime); err != nil {
		t.Fatal(err)
	}
	type helper struct {
		name string
		run  func(*testing.B, benchStore)
	}
	helpers := []helper{
		{"FirstIndex", func(b *testing.B, s benchStore) { raftbench.FirstIndex(b, s) }},
		{"LastIndex", func(b *testing.B, s benchStore) { raftbench.LastIndex(b, s) }},
		{"GetLog", func(b *testing.B, s benchStore) { raftbench.GetLog(b, s) }},
		{"StoreLog", func(b *testing.B, s benchStore) { raftbench.StoreLog(b, s) }},
		{"StoreLogs", func(b *testing.B, s benchStore) { raftbench.StoreLogs(b, s) }},
		{"DeleteRange", func(b *testing.B, s benchStore) { raftbench.DeleteRange(b, s) }},
		{"Set", func(b *testing.B, s benchStore) { raftbench.Set(b, s) }},
		{"Get", func(b *testing.B, s benchStore) { raftbench.Get(b, s) }},
		{"SetUint64", func(b *testing.B, s benchStore) { raftbench.SetUint64(b, s) }},
		{"GetUint64", func(b *testing.B, s benchStore) { raftbench.GetUint64(b, s) }},
	}
	// ns[helper][store] over the rounds
	ns := map[string]map[string][]float64{}
	for r := range rounds {
		for _, h := range helpers {
			if ns[h.name] == nil {
				ns[h.name] = map[string][]float64{}
			}
			for _, st := range benchStores {
				if h.name == "DeleteRange" && st.name == "wal" {
					continue
				}
				res := testing.Benchmark(func(b *testing.B) {
					dir, err := os.MkdirTemp("", "raftbench")
					if err != nil {
						b.Fatal(err)
					}
					defer os.RemoveAll(dir)
					s := st.open(b, dir)
					defer s.Close()
					h.run(b, s)
				})
				if res.N == 0 {
					t.Fatalf("%s/%s failed", h.name, st.name)
				}
				ns[h.name][st.name] = append(ns[h.name][st.name], float64(res.T.Nanoseconds())/float64(res.N))
			}
		}
		t.Logf("round %d of %d done", r+1, rounds)
	}
	med := func(v []float64) float64 {
		c := slices.Clone(v)
		slices.Sort(c)
		return c[len(c)/2]
	}
	rng := func(v []float64) string {
		return fmt.Sprintf("%s (%s–%s)", fmtNs(med(v)), fmtNs(slices.Min(v)), fmtNs(slices.Max(v)))
	}
	ratio := func(a, b []float64) string { // per round a/b: median (min–max)
		if len(a) == 0 || len(b) == 0 {
			return "n/a"
		}
		var q []float64
		for i := range a {
			q = append(q, a[i]/b[i])
		}
		return fmt.Sprintf("%.2f (%.2f–%.2f)", med(q), slices.Min(q), slices.Max(q))
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d interleaved rounds of %s per run; ns/op median (min–max); ratios per round, median (min–max)\n\n", rounds, benchtime)
	out.WriteString("| helper | kdb | raft-boltdb | raft-wal | boltdb ÷ kdb (≥ 2 is 2× faster) | kdb ÷ wal (≤ 1.2 is within 1.2×) |\n|---|---|---|---|---|---|\n")
	for _, h := range helpers {
		m := ns[h.name]
		walCol := "n/a (refuses gaps)"
		if len(m["wal"]) > 0 {
			walCol = rng(m["wal"])
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s |\n", h.name, rng(m["kdb"]), rng(m["boltdb"]), walCol,
			ratio(m["boltdb"], m["kdb"]), ratio(m["kdb"], m["wal"]))
	}
	fmt.Println(out.String())
}

func fmtNs(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f ms", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f µs", v/1e3)
	}
	return fmt.Sprintf("%.0f ns", v)
}
