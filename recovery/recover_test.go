package recovery

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// The tests give journal records a meaning of their own (the root's is
// not recovery's business): a record of type recPut holds "key=value",
// put into the tree "t".
const recPut journal.RecordType = 1

var tree = []byte("t")

// store is a store opened by Run with that meaning, written the
// way the root writes: a record is made durable in the journal, then
// applied to the index, and a checkpoint records the last record applied
// as its replay position.
type store struct {
	t       *testing.T
	st      *State
	rep     *Report
	applied journal.Location

	// What Run called, in order: "apply <key>", "recovered", "checkpoint".
	calls []string
	// replayed are the locations Apply was called with.
	replayed []journal.Location
	// ckErr, if set, is what the Checkpoint callback returns.
	ckErr error
	// recErr, if set, is what the Recovered callback returns.
	recErr error
}

func put(tx *index.Tx, r journal.Record) (string, error) {
	if r.Type != recPut {
		return "", fmt.Errorf("unknown record type %d", r.Type)
	}
	k, v, ok := bytes.Cut(r.Payload, []byte("="))
	if !ok {
		return "", fmt.Errorf("bad record %q", r.Payload)
	}
	t, err := tx.OpenTree(tree)
	if err == nil && t == nil {
		t, err = tx.CreateTree(tree)
	}
	if err != nil {
		return "", err
	}
	return string(k), t.Put(k, v)
}

// options returns Run's options for s; edit lets a test change them.
func (s *store) options(fsys vfs.FS, edit func(*Options)) Options {
	o := Options{
		FS:           fsys,
		PageFile:     pagefile.Options{PageSize: 4096},
		Journal:      journal.Options{SegmentSize: 64 << 10},
		ChunkRecords: 3, // several chunks in every replay of the tests
		Apply: func(tx *index.Tx, loc journal.Location, r journal.Record) error {
			k, err := put(tx, r)
			if err != nil {
				return err
			}
			s.calls = append(s.calls, "apply "+k)
			s.replayed = append(s.replayed, loc)
			return nil
		},
		Recovered: func(st *State, rep *Report) error {
			s.calls = append(s.calls, "recovered")
			s.st, s.rep, s.applied = st, rep, st.LastApplied
			return s.recErr
		},
		Checkpoint: func() error {
			s.calls = append(s.calls, "checkpoint")
			if s.ckErr != nil {
				return s.ckErr
			}
			return s.checkpoint()
		},
	}
	if edit != nil {
		edit(&o)
	}
	return o
}

// run opens the store in dir of fsys with a fresh record of calls.
func run(t *testing.T, fsys vfs.FS, dir string, edit func(*Options)) (*store, error) {
	t.Helper()
	s := &store{t: t}
	st, rep, err := Run(dir, s.options(fsys, edit))
	if err != nil {
		if st != nil {
			t.Errorf("Run failed (%v) but returned a State", err)
		}
		return s, err
	}
	if st != s.st || rep != s.rep {
		t.Errorf("Run returned a State or Report other than the one it gave Recovered")
	}
	s.st, s.rep = st, rep
	return s, nil
}

func mustRun(t *testing.T, fsys vfs.FS, dir string, edit func(*Options)) *store {
	t.Helper()
	s, err := run(t, fsys, dir, edit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// write makes one record durable and applies it, returning its location.
func (s *store) write(key, value string) journal.Location {
	s.t.Helper()
	rec := journal.Record{Type: recPut, Payload: []byte(key + "=" + value)}
	locs, end, err := s.st.Journal.Write(rec)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.st.Journal.SyncTo(end); err != nil {
		s.t.Fatal(err)
	}
	if err := s.st.Index.Update(func(tx *index.Tx) error {
		_, err := put(tx, rec)
		return err
	}); err != nil {
		s.t.Fatal(err)
	}
	s.applied = locs[0]
	return locs[0]
}

func (s *store) checkpoint() error {
	return s.st.Index.CheckpointWith(func() pagefile.MetaUpdate {
		return pagefile.MetaUpdate{ReplaySegment: uint64(s.applied.Segment), ReplayOffset: uint64(s.applied.Offset)}
	}, s.st.Journal.Sync)
}

func (s *store) close() {
	s.t.Helper()
	if err := s.st.Close(); err != nil {
		s.t.Fatal(err)
	}
}

// get reads key from the recovered index.
func (s *store) get(key string) (string, bool) {
	s.t.Helper()
	var v []byte
	var ok bool
	if err := s.st.Index.View(func(tx *index.Tx) error {
		t, err := tx.OpenTree(tree)
		if err != nil || t == nil {
			return err
		}
		v, ok, err = t.Get([]byte(key))
		v = bytes.Clone(v)
		return err
	}); err != nil {
		s.t.Fatal(err)
	}
	return string(v), ok
}

func key(i int) string { return fmt.Sprintf("k%04d", i) }

// A fresh directory, under parents that do not exist yet, becomes a new
// store; the directories are durable (they survive a power loss at once),
// and the second Run finds the store it made.
func TestRun_FreshDirCreatesStore(t *testing.T) {
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/a/b/store", nil)
	if !s.rep.PageFile.Created || s.rep.PageFile.FreeListPath != pagefile.FreeListCreated {
		t.Errorf("report %+v: want a created store", s.rep.PageFile)
	}
	if s.rep.RecordsReplayed != 0 || !s.rep.ReplayFrom.IsZero() {
		t.Errorf("a new store: %d records replayed from %s", s.rep.RecordsReplayed, s.rep.ReplayFrom)
	}
	// Its first checkpoint, before Run returns, names the journal.
	if !s.rep.NeedsCheckpoint || !s.rep.Checkpointed {
		t.Errorf("a new store: NeedsCheckpoint %v, Checkpointed %v: want its first checkpoint taken", s.rep.NeedsCheckpoint, s.rep.Checkpointed)
	}
	if s.st.Lock == nil {
		t.Error("a writable Run holds no lock")
	}
	if !slices.Equal(s.calls, []string{"recovered", "checkpoint"}) {
		t.Errorf("calls %v, want recovered, then checkpoint", s.calls)
	}
	img := mem.CrashClone(vfs.CrashOptions{})
	for _, d := range []string{"/a", "/a/b", "/a/b/store", "/a/b/store/db.data"} {
		if ok, err := vfs.Exists(img, d); err != nil || !ok {
			t.Errorf("%s is not durable after Run: %v %v", d, ok, err)
		}
	}
	s.write("k", "v")
	s.close()

	s = mustRun(t, mem, "/a/b/store", nil)
	defer s.close()
	if s.rep.PageFile.Created {
		t.Error("the second Run created the store again")
	}
	if v, ok := s.get("k"); !ok || v != "v" {
		t.Errorf("k = %q %v after reopen, want v", v, ok)
	}
	if s.rep.ReplayFrom.Segment != 1 {
		t.Errorf("the second Run replayed from %s, want the first checkpoint's position in db-1.log", s.rep.ReplayFrom)
	}
}

// A store that lost its first segment before any checkpoint of its own
// wrote is refused, naming it (an outside tester's broker store, killed
// before its first timed checkpoint, with db-1.log removed, opened empty):
// the first checkpoint Run takes names the journal. A crash during the
// creation itself, before that checkpoint, acknowledged nothing, and the
// next Run takes the store as new (TestOpen_CrashDuringCreation in the
// root crashes each of its writes).
func TestRun_NewStoreThatLostItsFirstSegmentIsCorrupt(t *testing.T) {
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/db", nil)
	s.write("k", "v")
	s.close()
	if err := mem.Remove("/db/db-1.log"); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, mem, "/db", nil)
	if !errors.Is(err, journal.ErrCorrupt) || !strings.Contains(err.Error(), "segment db-1.log is missing") {
		t.Fatalf("Run of a store that lost db-1.log: %v, want journal.ErrCorrupt naming db-1.log", err)
	}
}

// A second Run on a store whose lock is held fails at once with ErrLocked
// (and vfs.ErrLocked, naming the holder), opening nothing; once the first
// closes, the store opens again.
func TestRun_LockedDirFails(t *testing.T) {
	mem := vfs.NewMem()
	first := mustRun(t, mem, "/db", nil)
	first.write("k", "v")
	second, err := run(t, mem, "/db", nil)
	if !errors.Is(err, ErrLocked) || !errors.Is(err, vfs.ErrLocked) || !strings.Contains(err.Error(), "held by this process") {
		t.Fatalf("second Run: %v; want ErrLocked naming the holder", err)
	}
	if len(second.calls) != 0 {
		t.Errorf("the locked Run called %v", second.calls)
	}
	// A read-only Run takes no lock, so the held one does not stop it.
	ro := mustRun(t, mem, "/db", func(o *Options) { o.ReadOnly = true })
	if ro.st.Lock != nil {
		t.Error("a read-only Run holds a lock")
	}
	if v, ok := ro.get("k"); !ok || v != "v" {
		t.Errorf("read-only k = %q %v, want v (replayed)", v, ok)
	}
	ro.close()

	first.close()
	third := mustRun(t, mem, "/db", nil)
	third.close()
}

// lostStore builds a closed store in a MemFS with records in two journal
// segments or more, then removes db.data.
func lostStore(t *testing.T) *vfs.MemFS {
	t.Helper()
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/db", nil)
	for i := range 100 {
		s.write(key(i), strings.Repeat("x", 1000))
	}
	s.close()
	if err := mem.Remove("/db/db.data"); err != nil {
		t.Fatal(err)
	}
	return mem
}

// A store that lost db.data while its journal remains is ErrCorrupt
// naming db.data and what remains, for a writable and a read-only Run;
// nothing is created, and the failed writable Run releases the lock.
func TestRun_LostPageFileIsCorrupt(t *testing.T) {
	mem := lostStore(t)
	before, err := mem.ReadDir("/db")
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range before {
		if _, ok := journal.ParseSegmentName(n); ok {
			segs = append(segs, n)
		}
	}
	if len(segs) < 2 {
		t.Fatalf("want two segments or more, have %v", before)
	}
	want := fmt.Sprintf("%d journal segments %s to %s", len(segs), segs[0], segs[len(segs)-1])
	for _, ro := range []bool{false, true} {
		s, err := run(t, mem, "/db", func(o *Options) { o.ReadOnly = ro })
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "/db/db.data is missing") || !strings.Contains(err.Error(), want) {
			t.Errorf("read-only %v: %v; want ErrCorrupt naming db.data and %q", ro, err, want)
		}
		if len(s.calls) != 0 {
			t.Errorf("read-only %v: the failed Run called %v", ro, s.calls)
		}
	}
	after, err := mem.ReadDir("/db")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("Run changed the directory: %v -> %v", before, after)
	}
	lk, err := mem.Lock("/db/lock")
	if err != nil {
		t.Fatalf("the failed Run kept the lock: %v", err)
	}
	lk.Close()
}

// A read-only Run of a directory that holds no store fails and creates
// nothing.
func TestRun_ReadOnlyCreatesNothing(t *testing.T) {
	mem := vfs.NewMem()
	if _, err := run(t, mem, "/none/db", func(o *Options) { o.ReadOnly = true }); err == nil {
		t.Fatal("a read-only Run of a missing store succeeded")
	}
	if ok, err := vfs.Exists(mem, "/none"); err != nil || ok {
		t.Errorf("a read-only Run created /none: %v %v", ok, err)
	}
}

// A power loss after journal writes but before a checkpoint: Run replays
// exactly the records after the checkpoint's replay position, calling
// Apply for each, in journal order, in chunks, before Recovered; the index
// then holds every record written.
func TestRun_CrashReplaysRecordsAfterReplayPosition(t *testing.T) {
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/db", nil)
	const n, ck = 40, 15
	var locs []journal.Location
	for i := range n {
		locs = append(locs, s.write(key(i), fmt.Sprint(i)))
		if i == ck-1 {
			if err := s.checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The power fails with the store open: every record was synced, the
	// checkpoint covers the first ck of them.
	img := mem.CrashClone(vfs.CrashOptions{})
	s.close()

	r := mustRun(t, img, "/db", nil)
	defer r.close()
	if r.rep.ReplayFrom != locs[ck-1] {
		t.Errorf("replay position %s, want %s (the last record the checkpoint covered)", r.rep.ReplayFrom, locs[ck-1])
	}
	if !slices.Equal(r.replayed, locs[ck:]) {
		t.Errorf("Apply called at %v,\nwant %v", r.replayed, locs[ck:])
	}
	var want []string
	for i := ck; i < n; i++ {
		want = append(want, "apply "+key(i))
	}
	want = append(want, "recovered")
	if !slices.Equal(r.calls, want) {
		t.Errorf("calls %v,\nwant %v", r.calls, want)
	}
	if r.rep.RecordsReplayed != n-ck || r.st.LastApplied != locs[n-1] || !r.rep.NeedsCheckpoint {
		t.Errorf("replayed %d (want %d), last applied %s (want %s), NeedsCheckpoint %v (want true)",
			r.rep.RecordsReplayed, n-ck, r.st.LastApplied, locs[n-1], r.rep.NeedsCheckpoint)
	}
	for i := range n {
		if v, ok := r.get(key(i)); !ok || v != fmt.Sprint(i) {
			t.Errorf("%s = %q %v after recovery, want %d", key(i), v, ok, i)
		}
	}
}

// The same crash at every mutating file-system operation of the writes
// after a checkpoint, keeping a random part of what was not synced: each
// image recovers, replays a run of records starting right after the
// checkpoint's replay position, in order, with no gap, and never loses an
// acknowledged record.
func TestRun_CrashSweepAfterCheckpoint(t *testing.T) {
	const before, after = 5, 12
	base := vfs.NewMem()
	s := mustRun(t, base, "/db", nil)
	var locs []journal.Location
	for i := range before {
		locs = append(locs, s.write(key(i), "v"))
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	s.close()

	// workload writes the records after the checkpoint through fsys and
	// returns how many were acknowledged.
	workload := func(fsys vfs.FS) (acked int) {
		s, err := run(t, fsys, "/db", nil)
		if err != nil {
			return 0
		}
		defer s.st.Close()
		for i := before; i < before+after; i++ {
			rec := journal.Record{Type: recPut, Payload: []byte(key(i) + "=v")}
			_, end, err := s.st.Journal.Write(rec)
			if err != nil || s.st.Journal.SyncTo(end) != nil {
				return acked
			}
			acked++
		}
		return acked
	}
	probe := kdbtest.CrashAt(base.Clone(), 1<<30, vfs.CrashOptions{})
	if got := workload(probe.FS()); got != after {
		t.Fatalf("the workload acknowledged %d of %d without a crash", got, after)
	}
	total := probe.Mutations()
	for k := 1; k <= total; k++ {
		o := vfs.CrashOptions{KeepUnsynced: 0.5, GarbageUnsynced: 0.1, Seed: int64(k)}
		c := kdbtest.CrashAt(base.Clone(), k, o)
		acked := workload(c.FS())
		r, err := run(t, c.Image(), "/db", nil)
		if err != nil {
			t.Fatalf("crash at op %d of %d: %v", k, total, err)
		}
		if r.rep.ReplayFrom != locs[before-1] {
			t.Errorf("crash at op %d: replay position %s, want %s", k, r.rep.ReplayFrom, locs[before-1])
		}
		var want []string
		for i := before; i < before+len(r.replayed); i++ {
			want = append(want, "apply "+key(i))
		}
		want = append(want, "recovered")
		if !slices.Equal(r.calls, want) || len(r.replayed) < acked || len(r.replayed) > after {
			t.Errorf("crash at op %d (%d acknowledged): calls %v", k, acked, r.calls)
		}
		for i := 1; i < len(r.replayed); i++ {
			if !r.replayed[i-1].Less(r.replayed[i]) {
				t.Errorf("crash at op %d: Apply out of journal order: %v", k, r.replayed)
			}
		}
		for i := range before + acked {
			if _, ok := r.get(key(i)); !ok {
				t.Errorf("crash at op %d: acknowledged %s lost", k, key(i))
			}
		}
		r.close()
	}
	t.Logf("%d crash points", total)
}

// A clean close leaves a trusted free list: Run takes it and asks for no
// checkpoint. A forced scan (or a lost db.free) rebuilds the list, and
// Run asks for a checkpoint, so that the next open trusts it again.
func TestRun_TrustedFreeListVsScan(t *testing.T) {
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/db", nil)
	for i := range 50 {
		s.write(key(i), strings.Repeat("v", 500))
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	s.close()

	cases := []struct {
		name    string
		prepare func(*vfs.MemFS)
		edit    func(*Options)
		path    string
	}{
		{"clean", nil, nil, pagefile.FreeListTrusted},
		{"forced scan", nil, func(o *Options) { o.PageFile.ForceScan = true }, pagefile.FreeListScanned},
		{"db.free lost", func(m *vfs.MemFS) {
			for _, n := range []string{"/db/db.free", "/db/db.free.prev"} {
				if err := m.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
			}
		}, nil, pagefile.FreeListScanned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mem.Clone()
			if c.prepare != nil {
				c.prepare(m)
			}
			r := mustRun(t, m, "/db", c.edit)
			if r.rep.PageFile.FreeListPath != c.path {
				t.Errorf("free list %q (%s), want %q", r.rep.PageFile.FreeListPath, r.rep.PageFile.Reason, c.path)
			}
			scanned := c.path == pagefile.FreeListScanned
			if r.rep.NeedsCheckpoint != scanned || (scanned && r.rep.PageFile.PagesScanned == 0) {
				t.Errorf("NeedsCheckpoint %v, %d pages scanned; want a checkpoint asked for iff scanned",
					r.rep.NeedsCheckpoint, r.rep.PageFile.PagesScanned)
			}
			if r.rep.RecordsReplayed != 0 {
				t.Errorf("%d records replayed after a checkpoint of them all", r.rep.RecordsReplayed)
			}
			for i := range 50 {
				if _, ok := r.get(key(i)); !ok {
					t.Errorf("%s lost", key(i))
				}
			}
			r.close()
		})
	}
}

// The recovery checkpoint: Run calls Checkpoint after Recovered, only when
// the report asks for one and CheckpointBeforeServing is set, never when
// read-only; a Checkpoint or Recovered error fails Run and releases the
// lock.
func TestRun_RecoveryCheckpoint(t *testing.T) {
	// crashed is a store with 20 records written after its last checkpoint.
	crashed := func(t *testing.T) *vfs.MemFS {
		mem := vfs.NewMem()
		s := mustRun(t, mem, "/db", nil)
		for i := range 20 {
			s.write(key(i), "v")
		}
		img := mem.CrashClone(vfs.CrashOptions{})
		s.close()
		return img
	}
	before := func(o *Options) { o.CheckpointBeforeServing = true }

	t.Run("before serving", func(t *testing.T) {
		mem := crashed(t)
		s := mustRun(t, mem, "/db", before)
		if n := len(s.calls); n < 2 || s.calls[n-2] != "recovered" || s.calls[n-1] != "checkpoint" {
			t.Errorf("calls %v: want recovered then checkpoint last", s.calls)
		}
		if !s.rep.NeedsCheckpoint || !s.rep.Checkpointed || s.rep.CheckpointDuration <= 0 {
			t.Errorf("NeedsCheckpoint %v, Checkpointed %v in %v", s.rep.NeedsCheckpoint, s.rep.Checkpointed, s.rep.CheckpointDuration)
		}
		last := s.st.LastApplied
		s.close()
		// The checkpoint covered the replay: the next Run replays nothing
		// and asks for nothing.
		s = mustRun(t, mem, "/db", before)
		defer s.close()
		if s.rep.ReplayFrom != last || s.rep.RecordsReplayed != 0 || s.rep.NeedsCheckpoint || s.rep.Checkpointed {
			t.Errorf("after the recovery checkpoint: replay from %s (want %s), %d replayed, NeedsCheckpoint %v, Checkpointed %v",
				s.rep.ReplayFrom, last, s.rep.RecordsReplayed, s.rep.NeedsCheckpoint, s.rep.Checkpointed)
		}
		if slices.Contains(s.calls, "checkpoint") {
			t.Errorf("a clean store was checkpointed: %v", s.calls)
		}
	})
	t.Run("in the background", func(t *testing.T) {
		s := mustRun(t, crashed(t), "/db", nil)
		defer s.close()
		if slices.Contains(s.calls, "checkpoint") || !s.rep.NeedsCheckpoint || s.rep.Checkpointed {
			t.Errorf("calls %v, NeedsCheckpoint %v, Checkpointed %v: want the checkpoint left to the caller",
				s.calls, s.rep.NeedsCheckpoint, s.rep.Checkpointed)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		mem := crashed(t)
		names, _ := mem.ReadDir("/db")
		s := mustRun(t, mem, "/db", func(o *Options) { o.ReadOnly, o.CheckpointBeforeServing = true, true })
		if s.rep.RecordsReplayed != 20 || slices.Contains(s.calls, "checkpoint") || s.rep.NeedsCheckpoint || s.rep.Checkpointed {
			t.Errorf("read-only: %d replayed, calls %v, NeedsCheckpoint %v: want a replay in memory and no checkpoint",
				s.rep.RecordsReplayed, s.calls, s.rep.NeedsCheckpoint)
		}
		s.close()
		if after, _ := mem.ReadDir("/db"); !slices.Equal(names, after) {
			t.Errorf("a read-only Run changed the directory: %v -> %v", names, after)
		}
	})
	for _, c := range []struct {
		name string
		set  func(*store)
	}{
		{"checkpoint fails", func(s *store) { s.ckErr = errors.New("boom") }},
		{"recovered refuses", func(s *store) { s.recErr = errors.New("boom") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := crashed(t)
			s := &store{t: t}
			c.set(s)
			st, _, err := Run("/db", s.options(mem, before))
			if err == nil || st != nil || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("Run: %v, %v; want the callback's error", st, err)
			}
			lk, err := mem.Lock("/db/lock")
			if err != nil {
				t.Fatalf("the failed Run kept the lock: %v", err)
			}
			lk.Close()
			// Nothing was checkpointed: the next Run replays it all again.
			r := mustRun(t, mem, "/db", nil)
			defer r.close()
			if r.rep.RecordsReplayed != 20 {
				t.Errorf("%d replayed after the failed Run, want 20", r.rep.RecordsReplayed)
			}
		})
	}
	t.Run("needs the callback", func(t *testing.T) {
		s := &store{t: t}
		o := s.options(vfs.NewMem(), before)
		o.Checkpoint = nil
		if _, _, err := Run("/db", o); err == nil {
			t.Error("CheckpointBeforeServing without Checkpoint was accepted")
		}
	})
}
