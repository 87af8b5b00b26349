package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

// checkedStore opens a store with ten values kept in the journal and ten
// inline in index "t", checkpointed so that the index pages hold them all.
func checkedStore(t *testing.T) *DB {
	t.Helper()
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for i := range 10 {
		if err := db.Put("t", fmt.Appendf(nil, "big%d", i), bytes.Repeat([]byte{byte('a' + i)}, 700)); err != nil {
			t.Fatal(err)
		}
		if err := db.Put("t", fmt.Appendf(nil, "small%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Check(); err != nil {
		t.Fatalf("Check of the intact store: %v", err)
	}
	return db
}

// editIndex changes the index behind the mem tables (all flushed by the
// checkpoint): fn gets the tree named name.
func editIndex(t *testing.T, db *DB, name string, fn func(tr *index.Tree) error) {
	t.Helper()
	err := db.ix.Update(func(tx *index.Tx) error {
		tr, err := tx.OpenTree([]byte(name))
		if err != nil {
			return err
		}
		if tr == nil {
			return fmt.Errorf("no tree %q", name)
		}
		return fn(tr)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheck_CatchesIndexJournalDisagreement guards the checks of DB.Check
// that only the root package can make, each on damage that leaves the
// index structurally intact (index.Check passes): a per-segment reference
// count that disagrees with a recount (journal GC trusts it to decide
// which segments are dead), and a journal reference that names a place
// holding no record while its segment and size stay right (so the counts
// still agree and only reading the value finds it).
func TestCheck_CatchesIndexJournalDisagreement(t *testing.T) {
	t.Run("segment reference count", func(t *testing.T) {
		db := checkedStore(t)
		editIndex(t, db, segRefsTree, func(tr *index.Tree) error {
			c := tr.Cursor()
			k, v, ok := c.First()
			if !ok {
				return fmt.Errorf("no segment references: %v", c.Err())
			}
			v = bytes.Clone(v)
			binary.LittleEndian.PutUint64(v, binary.LittleEndian.Uint64(v)+1)
			return tr.Put(bytes.Clone(k), v)
		})
		_, err := db.Check()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "segment references of") {
			t.Fatalf("Check = %v, want ErrCorrupt naming the segment references", err)
		}
	})
	// A recorded segment no value refers to: journal GC keeps it (and
	// every later one) for ever. The recount has no entry for it, so only
	// comparing the two sets finds it.
	t.Run("segment reference count of a segment without values", func(t *testing.T) {
		db := checkedStore(t)
		editIndex(t, db, segRefsTree, func(tr *index.Tree) error {
			c := tr.Cursor()
			k, _, ok := c.Last()
			if !ok {
				return fmt.Errorf("no segment references: %v", c.Err())
			}
			k = binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(k)+100)
			v := binary.LittleEndian.AppendUint64(nil, 1)
			v = binary.LittleEndian.AppendUint64(v, 700)
			return tr.Put(k, v)
		})
		_, err := db.Check()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "segment references") {
			t.Fatalf("Check = %v, want ErrCorrupt naming the segment references", err)
		}
	})
	t.Run("reference to no record", func(t *testing.T) {
		db := checkedStore(t)
		editIndex(t, db, string(treeName(userTreePrefix, "t")), func(tr *index.Tree) error {
			v, ok, err := tr.Get([]byte("big3"))
			if err != nil || !ok {
				return fmt.Errorf("big3: %v %v", ok, err)
			}
			if _, _, isRef := decodeRefHeader(v); !isRef {
				return fmt.Errorf("big3 is not kept in the journal")
			}
			v = bytes.Clone(v)
			binary.LittleEndian.PutUint64(v[5:], binary.LittleEndian.Uint64(v[5:])+8) // inside the record
			return tr.Put([]byte("big3"), v)
		})
		if _, err := db.ix.Check(); err != nil {
			t.Fatalf("index.Check: %v", err)
		}
		_, err := db.Check()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "big3") {
			t.Fatalf("Check = %v, want ErrCorrupt naming key big3", err)
		}
	})
}

// TestCheck_CatchesAWrongCountInTheMemTables guards DB.Check's recount of
// every tree against its key count as the mem tables and the index
// together give it. index.Check recounts the index's trees only; a count
// the applier keeps in the mem tables (changes not yet checkpointed) is
// checked only here. The count is made wrong directly, as a bug in its
// upkeep would leave it.
func TestCheck_CatchesAWrongCountInTheMemTables(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 5 {
		if err := db.Put("t", fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Check(); err != nil {
		t.Fatalf("Check of the intact store: %v", err)
	}
	mt := db.mem.state.Load().active.tree(string(treeName(userTreePrefix, "t")))
	if mt == nil || mt.vers.Load() == nil {
		t.Fatal("index t has no count in the mem tables")
	}
	mt.vers.Load().count.Add(1)
	_, err = db.Check()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "its count says 6") {
		t.Fatalf("Check = %v, want ErrCorrupt naming the count", err)
	}
}

// TestCheck_CatchesATreeReplayWouldRefuse guards DB.Check's check of tree
// names: a tree in the index that no batch can write (outside every
// namespace, or an engine tree other than the segment references) is
// damage; replay and Import refuse such names, so only Check finds one
// already in the pages.
func TestCheck_CatchesATreeReplayWouldRefuse(t *testing.T) {
	for _, name := range []string{"stray", "k/other"} {
		t.Run(name, func(t *testing.T) {
			db := checkedStore(t)
			if err := db.ix.Update(func(tx *index.Tx) error {
				tr, err := tx.CreateTree([]byte(name))
				if err != nil {
					return err
				}
				return tr.Put([]byte("k"), []byte{valInline, 'v'})
			}); err != nil {
				t.Fatal(err)
			}
			_, err := db.Check()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
				t.Fatalf("Check = %v, want ErrCorrupt naming tree %q", err, name)
			}
		})
	}
}

// TestCheck_CatchesABadValueTag guards DB.Check's check of each index
// value's tag: a value whose first byte is neither valInline nor
// valJournal is one Get refuses as corrupt, so Check must too (it skips
// resolving all but journal references).
func TestCheck_CatchesABadValueTag(t *testing.T) {
	db := checkedStore(t)
	editIndex(t, db, string(treeName(userTreePrefix, "t")), func(tr *index.Tree) error {
		return tr.Put([]byte("small3"), []byte{valJournal + 1, 'v'})
	})
	if _, err := db.Get("t", []byte("small3")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get = %v, want ErrCorrupt", err)
	}
	_, err := db.Check()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bad value tag") {
		t.Fatalf("Check = %v, want ErrCorrupt naming the bad value tag", err)
	}
}

// journalRef reads key's raw index value (a journal reference) from tree "t".
func journalRef(t *testing.T, db *DB, key string) []byte {
	t.Helper()
	var ref []byte
	err := db.ix.View(func(tx *index.Tx) error {
		tr, err := tx.OpenTree(treeName(userTreePrefix, "t"))
		if err != nil || tr == nil {
			return err
		}
		v, _, err := tr.Get([]byte(key))
		ref = append([]byte(nil), v...)
		return err
	})
	if err != nil || len(ref) != valRefSize || ref[0] != valJournal {
		t.Fatalf("ref of %s: %x, %v", key, ref, err)
	}
	return ref
}

// TestRead_RefusesAReferenceOfTheWrongSize: an index value that names
// the right value record with the wrong size (damage) must read as
// ErrCorrupt, not as a value of some length. (An outside tester's
// mutant of resolve, no longer comparing the lengths, went unnoticed.)
func TestRead_RefusesAReferenceOfTheWrongSize(t *testing.T) {
	db := checkedStore(t)
	ref := journalRef(t, db, "big0")
	binary.LittleEndian.PutUint32(ref[13:], 699) // the record holds 700
	editIndex(t, db, string(treeName(userTreePrefix, "t")), func(tr *index.Tree) error {
		return tr.Put([]byte("big0"), ref)
	})
	if v, err := db.Get("t", []byte("big0")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get = %d bytes, %v; want ErrCorrupt", len(v), err)
	}
}

// TestRead_RefusesAReferenceToABatchRecord: an index value that names
// a batch record (its size right) must read as ErrCorrupt, never return the
// batch's encoded operations as the value. (An outside tester's mutant
// of resolve, no longer checking the record's type, went unnoticed.)
func TestRead_RefusesAReferenceToABatchRecord(t *testing.T) {
	db := checkedStore(t)
	var bloc journal.Location
	var blen int
	err := db.j.Iterate(journal.Location{}, func(loc journal.Location, r journal.Record) error {
		if r.Type == recBatch && bloc.IsZero() {
			bloc, blen = loc, len(r.Payload)
		}
		return nil
	})
	if err != nil || bloc.IsZero() {
		t.Fatalf("no batch record found: %v", err)
	}
	ref := appendRef(nil, bloc, blen)
	editIndex(t, db, string(treeName(userTreePrefix, "t")), func(tr *index.Tree) error {
		return tr.Put([]byte("big0"), ref)
	})
	if v, err := db.Get("t", []byte("big0")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get = %q, %v; want ErrCorrupt", v, err)
	}
}
