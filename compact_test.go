package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// The journal-space bound of docs/DESIGN.md ("Space: compaction and the
// factor"), for segments and checkpoint intervals of these sizes.
const (
	spaceSegSize = 64 << 10
	spaceCkBytes = 256 << 10
)

func spaceBound(live int64) int64 { return 4*live + 3*spaceCkBytes + 3*spaceSegSize }

func spaceOpts(fs vfs.FS) *kdb.Options {
	return &kdb.Options{FS: fs, SegmentSize: spaceSegSize, CheckpointBytes: spaceCkBytes,
		CheckpointInterval: -1, Sync: kdb.UnsafeSyncNever}
}

// journalSize returns the bytes of the journal's segments on disk.
func journalSize(t testing.TB, fs vfs.FS, dir string) (n int, size int64) {
	t.Helper()
	names, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if len(name) > 4 && name[len(name)-4:] == ".log" {
			sz, _, err := fs.Stat(dir + "/" + name)
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since ReadDir by the background checkpoint's GC
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
			size += sz
		}
	}
	return n, size
}

// One value written once, then thousands of overwrites of another key: the
// first value pins every later segment unless compaction moves it. Two
// checkpoints later the journal is within the bound (before compaction for
// every tree: 134 segments).
func TestCompact_OneOldValuePinsNothing(t *testing.T) {
	for _, ns := range []string{"", "raft"} {
		t.Run("namespace="+ns, func(t *testing.T) {
			fs := vfs.NewMem()
			db, err := kdb.Open("/db", spaceOpts(fs))
			if err != nil {
				t.Fatal(err)
			}
			put := func(index string, k, v []byte) error { return db.Put(index, k, v) }
			get := func(index string, k []byte) ([]byte, error) { return db.Get(index, k) }
			if ns != "" {
				n, err := db.Namespace(ns)
				if err != nil {
					t.Fatal(err)
				}
				put = func(index string, k, v []byte) error {
					b := n.NewBatch()
					b.Put(index, k, v)
					return db.Write(b)
				}
				get = n.Get
			}
			old := bytes.Repeat([]byte("o"), 1024)
			if err := put("a", []byte("once"), old); err != nil {
				t.Fatal(err)
			}
			hot := make([]byte, 4096)
			for i := range 2000 {
				hot[0], hot[1] = byte(i), byte(i>>8)
				if err := put("b", []byte("hot"), hot); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := journalSize(t, fs, "/db")
			for range 2 {
				if err := db.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			segs, size := journalSize(t, fs, "/db")
			live := int64(len(old) + len(hot))
			st := db.Stats()
			t.Logf("segments: %d before the checkpoints, %d after (%d KiB, bound %d KiB); %d passes moved %d values",
				before, segs, size>>10, spaceBound(live)>>10, st.Compactions, st.CompactedValues)
			if size > spaceBound(live) {
				t.Fatalf("journal %d bytes after two checkpoints, bound %d", size, spaceBound(live))
			}
			if segs > 2 || st.PinnedSegments != 0 {
				t.Fatalf("%d segments left (%d pinned), want at most 2 (none pinned)", segs, st.PinnedSegments)
			}
			if st.Compactions == 0 || st.CompactedValues == 0 {
				t.Fatalf("no compaction ran: %+v", st)
			}
			for _, f := range []func(){func() {}, func() {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if db, err = kdb.Open("/db", spaceOpts(fs)); err != nil {
					t.Fatal(err)
				}
				if ns != "" {
					n, _ := db.Namespace(ns)
					get = n.Get
				} else {
					get = db.Get
				}
			}} {
				f()
				if v, err := get("a", []byte("once")); err != nil || !bytes.Equal(v, old) {
					t.Fatalf("moved value: %d bytes, %v", len(v), err)
				}
				if v, err := get("b", []byte("hot")); err != nil || !bytes.Equal(v, hot) {
					t.Fatalf("hot value: %d bytes, %v", len(v), err)
				}
				if _, err := db.Check(); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A move that finds its key changed since the pass read it does nothing:
// writers racing compaction always win, live and after a crash (the same
// rule runs in replay). Concurrent writers overwrite and delete the keys
// compaction is moving; every key ends with the last value its writer gave
// it, before and after a power loss.
func TestCompact_RacingWritersWin(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		t.Run(fmt.Sprint("round=", round), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := spaceOpts(fs)
			opts.Sync = kdb.SyncAlways
			db, err := kdb.Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			const keys = 200
			val := func(k, gen int) []byte {
				v := bytes.Repeat([]byte{byte(gen)}, 600+k)
				copy(v, fmt.Sprintf("%d/%d", k, gen))
				return v
			}
			// Many journal-resident values, then filler so their segments
			// become sparse and pinned.
			for k := range keys {
				if err := db.Put("v", []byte(fmt.Sprint(k)), val(k, 0)); err != nil {
					t.Fatal(err)
				}
			}
			filler := make([]byte, 4000)
			for range 400 {
				if err := db.Put("f", []byte("x"), filler); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Checkpoint(); err != nil { // compacts at its end
				t.Fatal(err)
			}
			for range 200 {
				if err := db.Put("f", []byte("x"), filler); err != nil {
					t.Fatal(err)
				}
			}
			// The race: writers change keys while a checkpoint's pass and
			// explicit Compact calls move them.
			var mu sync.Mutex
			want := map[int][]byte{}
			for k := range keys {
				want[k] = val(k, 0)
			}
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
					for i := range 150 {
						k := w + 2*r.IntN(keys/2) // each writer owns its keys
						var err error
						mu.Lock()
						if r.IntN(4) == 0 {
							err = db.Delete("v", []byte(fmt.Sprint(k)))
							if err == nil {
								delete(want, k)
							}
						} else {
							v := val(k, i+1)
							err = db.Put("v", []byte(fmt.Sprint(k)), v)
							if err == nil {
								want[k] = v
							}
						}
						mu.Unlock()
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					if err := db.Checkpoint(); err != nil {
						t.Error(err)
						return
					}
					if _, err := db.Compact(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			wg.Wait()
			check := func(db *kdb.DB, when string) {
				t.Helper()
				for k := range keys {
					v, err := db.Get("v", []byte(fmt.Sprint(k)))
					w, ok := want[k]
					switch {
					case !ok && !errors.Is(err, kdb.ErrNotFound):
						t.Fatalf("%s: key %d deleted, got %d bytes, %v", when, k, len(v), err)
					case ok && (err != nil || !bytes.Equal(v, w)):
						t.Fatalf("%s: key %d: got %q.., %v, want %q..", when, k, v[:min(len(v), 8)], err, w[:8])
					}
				}
				if _, err := db.Check(); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
			}
			check(db, "live")
			st := db.Stats()
			if st.CompactedValues == 0 {
				t.Fatalf("nothing was moved: %+v", st)
			}
			// Power loss now: every acknowledged (synced) write survives,
			// and no move resurrects an old value.
			img := fs.CrashClone(vfs.CrashOptions{})
			db2, err := kdb.Open("/db", spaceOpts(img))
			if err != nil {
				t.Fatal(err)
			}
			check(db2, "after a power loss")
			if err := db2.Close(); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Random workloads over user indexes and a namespace (puts of inline and
// journal-resident values, overwrites, deletes, dropped indexes): after
// every checkpoint (which compacts at its end), the journal is within
// 4 × live + 3 × CheckpointBytes + 3 × SegmentSize, live being the bytes
// of the journal-resident values the model holds.
func TestCompact_BoundProperty(t *testing.T) {
	seeds, ops := 6, 6000
	if testing.Short() {
		seeds, ops = 3, 3000
	}
	if os.Getenv("KDB_LONG") == "1" {
		seeds, ops = 30, 20000
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			fs := vfs.NewMem()
			db, err := kdb.Open("/db", spaceOpts(fs))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ns, err := db.Namespace("q")
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(seed), 77))
			type key struct{ space, index, key string }
			model := map[key][]byte{}
			// Each seed has its own mix: how many keys stay live, how big
			// values are, how often keys are rewritten.
			nkeys := 10 + r.IntN(500)
			bigShare := r.Float64()
			var lastJournal int64
			checks := 0
			for i := range ops {
				space := "u"
				b := kdb.NewBatch()
				if r.IntN(3) == 0 {
					space = "q"
					b = ns.NewBatch()
				}
				index := fmt.Sprint("i", r.IntN(4))
				k := fmt.Sprint("k", r.IntN(nkeys))
				switch x := r.IntN(100); {
				case x < 70:
					n := 10 + r.IntN(400)
					if r.Float64() < bigShare {
						n = 513 + r.IntN(6000)
					}
					v := make([]byte, n)
					v[0], v[1] = byte(i), byte(i>>8)
					b.Put(index, []byte(k), v)
					model[key{space, index, k}] = v
				case x < 98:
					b.Delete(index, []byte(k))
					delete(model, key{space, index, k})
				default:
					b.DropIndex(index)
					for mk := range model {
						if mk.space == space && mk.index == index {
							delete(model, mk)
						}
					}
				}
				if err := db.Write(b); err != nil {
					t.Fatal(err)
				}
				if jb := db.Stats().JournalBytes; jb-lastJournal >= spaceCkBytes {
					lastJournal = jb
					if err := db.Checkpoint(); err != nil {
						t.Fatal(err)
					}
					var live int64
					for _, v := range model {
						if len(v) > 512 {
							live += int64(len(v))
						}
					}
					_, size := journalSize(t, fs, "/db")
					if size > spaceBound(live) {
						t.Fatalf("op %d: journal %d KiB, bound %d KiB (live %d KiB)", i, size>>10, spaceBound(live)>>10, live>>10)
					}
					checks++
				}
			}
			if checks < 5 {
				t.Fatalf("only %d checkpoints checked", checks)
			}
			for mk, v := range model {
				get := db.Get
				if mk.space == "q" {
					get = ns.Get
				}
				got, err := get(mk.index, []byte(mk.key))
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%v: %d bytes, %v", mk, len(got), err)
				}
			}
			if _, err := db.Check(); err != nil {
				t.Fatal(err)
			}
			st := db.Stats()
			t.Logf("%d checkpoints checked; %d passes moved %d values", checks, st.Compactions, st.CompactedValues)
		})
	}
}

// A pass that found every value live, then deletes that fit in the same
// journal segment (a Raft log truncated after a snapshot writes only small
// delete records): the next checkpoint's pass still runs, and the journal
// is within the bound right after it (a pass used to run at most once per
// replay segment: 3,328 KiB against a bound of 1,696).
func TestCompact_DeletesWithinOneSegmentStillCompact(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", spaceOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	val := make([]byte, 4096)
	const n = 768 // 3 MiB of journal values, 48 segments
	for i := range n {
		if err := db.Put("x", []byte(fmt.Sprintf("k%04d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil { // its pass finds every value live
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	for i := 10; i < n; i++ {
		b.Delete("x", []byte(fmt.Sprintf("k%04d", i)))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	live := int64(10 * len(val))
	_, size := journalSize(t, fs, "/db")
	if size > spaceBound(live) {
		st := db.Stats()
		t.Fatalf("journal %d KiB right after a checkpoint, bound %d KiB (pinned %d KiB, %d passes)", size>>10, spaceBound(live)>>10, st.PinnedBytes>>10, st.Compactions)
	}
}
