package raftkdb

import (
	"io"
	"path/filepath"
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
