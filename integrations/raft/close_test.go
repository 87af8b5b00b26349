package raftkdb

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestStore_UseAfterClose: every method of a closed Store returns an error
// wrapping kdb.ErrClosed, whether Open made it (Close closed the kdb store)
// or New did (the kdb store stays open for its owner): FirstIndex and
// LastIndex (served from memory), a DeleteRange outside the cached bounds
// and a StoreLogs on the still-open kdb store included; a second Close too.
func TestStore_UseAfterClose(t *testing.T) {
	for _, how := range []string{"Open", "New"} {
		t.Run(how, func(t *testing.T) {
			fs := vfs.NewMem()
			var s *Store
			var db *kdb.DB
			if how == "Open" {
				s = openMem(t, fs, nil)
			} else {
				var err error
				if db, err = kdb.Open("/db", &kdb.Options{FS: fs}); err != nil {
					t.Fatal(err)
				}
				if s, err = New(db, DefaultNamespace); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.StoreLogs([]*raft.Log{entry(20, 1, 10), entry(21, 1, 10)}); err != nil {
				t.Fatal(err)
			}
			if err := s.SetUint64([]byte("t"), 1); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			var l raft.Log
			_, errFirst := s.FirstIndex()
			_, errLast := s.LastIndex()
			_, errGet := s.Get([]byte("t"))
			_, errGetU := s.GetUint64([]byte("t"))
			for name, err := range map[string]error{
				"second Close":          s.Close(),
				"FirstIndex":            errFirst,
				"LastIndex":             errLast,
				"GetLog":                s.GetLog(20, &l),
				"StoreLogs":             s.StoreLogs([]*raft.Log{entry(22, 1, 10)}),
				"StoreLog":              s.StoreLog(entry(22, 1, 10)),
				"DeleteRange (outside)": s.DeleteRange(1, 2),
				"DeleteRange (inside)":  s.DeleteRange(21, 21),
				"DeleteRange (all)":     s.DeleteRange(0, 100),
				"Set":                   s.Set([]byte("k"), []byte("v")),
				"SetUint64":             s.SetUint64([]byte("k"), 2),
				"Get":                   errGet,
				"GetUint64":             errGetU,
			} {
				if !errors.Is(err, kdb.ErrClosed) {
					t.Errorf("%s after Close: %v, want kdb.ErrClosed", name, err)
				}
			}
			if db != nil {
				// The kdb store is still open and the log untouched.
				s2, err := New(db, DefaultNamespace)
				if err != nil {
					t.Fatal(err)
				}
				if f, l := bounds(t, s2); f != 20 || l != 21 {
					t.Fatalf("after the closed Store's calls: first %d last %d, want 20 21", f, l)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestStore_StoreLogsNilEntry: a nil entry in StoreLogs is kdb.ErrInvalid
// and nothing of the call is stored (it used to panic).
func TestStore_StoreLogsNilEntry(t *testing.T) {
	s := openMem(t, vfs.NewMem(), nil)
	defer s.Close()
	err := s.StoreLogs([]*raft.Log{entry(1, 1, 10), nil})
	if !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("StoreLogs with a nil entry: %v, want kdb.ErrInvalid", err)
	}
	if f, l := bounds(t, s); f != 0 || l != 0 {
		t.Fatalf("after the refused call: first %d last %d", f, l)
	}
}

// TestStore_NilArguments: nil where a pointer is wanted is an error wrapping
// kdb.ErrInvalid, never a panic: New with a nil db and GetLog with a nil
// *raft.Log (on an absent and on a present index) panicked with a nil
// pointer dereference; StoreLog of a nil entry stores nothing.
func TestStore_NilArguments(t *testing.T) {
	call := func(name string, fn func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s panicked: %v", name, r)
				}
			}()
			err = fn()
		}()
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("%s: %v, want kdb.ErrInvalid", name, err)
		}
	}
	call("New(nil, \"raft\")", func() error {
		s, err := New(nil, DefaultNamespace)
		if s != nil {
			t.Errorf("New(nil, ...) returned a Store")
		}
		return err
	})
	s := openMem(t, vfs.NewMem(), nil)
	defer s.Close()
	call("GetLog(1, nil) on an empty log", func() error { return s.GetLog(1, nil) })
	call("StoreLog(nil)", func() error { return s.StoreLog(nil) })
	if f, l := bounds(t, s); f != 0 || l != 0 {
		t.Fatalf("after StoreLog(nil): first %d last %d", f, l)
	}
	if err := s.StoreLog(entry(1, 1, 10)); err != nil {
		t.Fatal(err)
	}
	call("GetLog(1, nil) on a stored entry", func() error { return s.GetLog(1, nil) })
	var got raft.Log
	if err := s.GetLog(1, &got); err != nil || !sameLog(&got, entry(1, 1, 10)) {
		t.Fatalf("GetLog(1) after the nil calls: %+v, %v", got, err)
	}
}

// TestStore_OneStorePerNamespace: a second Store on a namespace whose Store
// is open is refused (each caches the log's bounds and would not see the
// other's writes: the second's LastIndex stayed 0 after the first stored
// entries); another namespace, or the same one after Close, is fine.
func TestStore_OneStorePerNamespace(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s1, err := New(db, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(db, DefaultNamespace); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("a second Store on the namespace: %v, want kdb.ErrInvalid", err)
	}
	other, err := New(db, "raft2")
	if err != nil {
		t.Fatalf("a Store on another namespace: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s1.StoreLogs([]*raft.Log{entry(1, 1, 10), entry(2, 1, 10)}); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := New(db, DefaultNamespace)
	if err != nil {
		t.Fatalf("a Store after the first was closed: %v", err)
	}
	defer s2.Close()
	if f, l := bounds(t, s2); f != 1 || l != 2 {
		t.Fatalf("the new Store's bounds: first %d last %d, want 1 2", f, l)
	}
	// A Store of another kdb store on the same namespace name is its own.
	db2, err := kdb.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	s3, err := New(db2, DefaultNamespace)
	if err != nil {
		t.Fatalf("a Store of another kdb store: %v", err)
	}
	s3.Close()
}

// TestStore_CloseWaitsForSet: Close waits for a Set in progress, as it does
// for StoreLogs and DeleteRange. A Set that had passed its closed check
// wrote after Close returned, so that on a Store made by New the closed
// Store's SetUint64 could land after a new Store's, taking CurrentTerm back.
// Here the Set is held inside its fsync while Close runs.
func TestStore_CloseWaitsForSet(t *testing.T) {
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	var once, unblock sync.Once
	fs := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync && armed.Load() {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	})
	letGo := func() { unblock.Do(func() { armed.Store(false); close(release) }) }
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, CheckpointBeforeServing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer letGo() // before db.Close, which waits for the held write
	s, err := New(db, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	setDone := make(chan error, 1)
	go func() { setDone <- s.SetUint64([]byte("CurrentTerm"), 1) }()
	<-entered // the Set is writing
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Set was still writing", err)
	case <-time.After(100 * time.Millisecond):
	}
	letGo()
	if err := <-setDone; err != nil {
		t.Fatalf("the Set Close waited for: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	s2, err := New(db, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); !errors.Is(err, kdb.ErrClosed) {
		t.Fatalf("SetUint64 on the closed Store: %v, want kdb.ErrClosed", err)
	}
	if v, err := s2.GetUint64([]byte("CurrentTerm")); err != nil || v != 2 {
		t.Fatalf("the new Store's CurrentTerm: %d, %v; want 2", v, err)
	}
}

// TestStore_OwnerClosedTheDB: a Store made by New on a kdb store its owner
// then closed answers every call with kdb.ErrClosed, FirstIndex and
// LastIndex too (they used to return the bounds cached in memory, as if
// the log were still there).
func TestStore_OwnerClosedTheDB(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(db, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{entry(5, 1, 10), entry(6, 1, 10)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	_, errFirst := s.FirstIndex()
	_, errLast := s.LastIndex()
	for name, err := range map[string]error{
		"FirstIndex": errFirst,
		"LastIndex":  errLast,
		"GetLog":     s.GetLog(5, &l),
		"StoreLogs":  s.StoreLogs([]*raft.Log{entry(7, 1, 10)}),
	} {
		if !errors.Is(err, kdb.ErrClosed) {
			t.Errorf("%s after the kdb store was closed: %v, want kdb.ErrClosed", name, err)
		}
	}
}
