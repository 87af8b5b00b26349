package kdb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

// Journal record types and batch op kinds of the root package, FORMAT.md
// §5.1 and §5.2, spelled out here to forge records the writer never builds.
const (
	forgedValue = 1 // record type: a value kept in the journal
	forgedBatch = 2 // record type: a batch record

	forgedPut        = 1
	forgedPutJournal = 2
	forgedDelete     = 3
	forgedDropTree   = 4
	forgedMove       = 5
)

// appendLP appends s with its uvarint length.
func appendLP(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func putOp(tree, key, val []byte) []byte {
	return appendLP(appendLP(appendLP([]byte{forgedPut}, tree), key), val)
}

func putJournalOp(tree, key []byte, ref, size uint64) []byte {
	b := appendLP(appendLP([]byte{forgedPutJournal}, tree), key)
	return binary.AppendUvarint(binary.AppendUvarint(b, ref), size)
}

func moveOp(tree, key []byte, ref, size uint64, from journal.Location) []byte {
	b := appendLP(appendLP([]byte{forgedMove}, tree), key)
	b = binary.AppendUvarint(binary.AppendUvarint(b, ref), size)
	return binary.AppendUvarint(binary.AppendUvarint(b, uint64(from.Segment)), uint64(from.Offset))
}

func deleteOp(tree, key []byte) []byte {
	return appendLP(appendLP([]byte{forgedDelete}, tree), key)
}

func dropOp(tree []byte) []byte { return appendLP([]byte{forgedDropTree}, tree) }

// batchRecord is a batch record (version 1) of the encoded ops.
func batchRecord(ops ...[]byte) journal.Record {
	p := binary.AppendUvarint([]byte{1}, uint64(len(ops)))
	for _, o := range ops {
		p = append(p, o...)
	}
	return journal.Record{Type: forgedBatch, Payload: p}
}

// forge appends recs to the store's journal as one journal batch, through
// the journal package itself, so that every frame verifies (checksum,
// chain, batch flags) exactly as one the writer wrote, and returns the
// location of the last record.
func forge(t *testing.T, fs vfs.FS, segSize int64, maxRecord int, recs ...journal.Record) journal.Location {
	t.Helper()
	j, _, err := journal.Open("/db", journal.Options{FS: fs, SegmentSize: segSize, MaxRecordSize: maxRecord})
	if err != nil {
		t.Fatal(err)
	}
	locs, err := j.Append(recs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return locs[len(locs)-1]
}

// requireRefused requires a writable and a read-only Open of the store to
// fail with ErrCorrupt naming the record at loc and saying want, and the
// directory to be left as it was (no segment removed by journal GC).
func requireRefused(t *testing.T, mem *vfs.MemFS, opts func(vfs.FS) *kdb.Options, loc journal.Location, want string) {
	t.Helper()
	before := memNames(t, mem)
	for _, ro := range []bool{false, true} {
		o := opts(mem)
		o.ReadOnly = ro
		db, err := kdb.Open("/db", o)
		if err == nil {
			cerr := db.Close()
			t.Fatalf("read-only %v: Open replayed the forged batch at %s (Close: %v); segments now %v, were %v",
				ro, loc, cerr, memNames(t, mem), before)
		}
		if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), loc.String()) || !strings.Contains(err.Error(), want) {
			t.Fatalf("read-only %v: %v\nwant ErrCorrupt naming %s and saying %q", ro, err, loc, want)
		}
	}
	if after := memNames(t, mem); !slices.Equal(before, after) {
		t.Fatalf("a refused Open changed the directory: %v -> %v", before, after)
	}
}

// TestOpen_RefusesForgedBatches: a batch record whose frames verify but
// that the writer never builds is ErrCorrupt naming the record, and Open
// changes nothing. The outside tester's case: a batch that drops
// k/segrefs was replayed, the recovery checkpoint then saw no segment
// holding a value the index needs, and journal GC removed segments whose
// values the index still referred to. The batches here are appended after
// the last record of a store whose older segments hold such values.
func TestOpen_RefusesForgedBatches(t *testing.T) {
	base := segStore(t, 60, 2000, 20) // values of 2000 bytes stay in the journal
	if ids := segIDs(t, base); len(ids) < 3 {
		t.Fatalf("segments %v: want several, the oldest holding values the index needs", ids)
	}
	b := func(s string) []byte { return []byte(s) }
	seg1 := b("\x00\x00\x00\x01") // a segment-refs key: db-1.log
	refs := make([]byte, 16)      // a well-formed segment-refs value
	binary.LittleEndian.PutUint64(refs, 5)
	binary.LittleEndian.PutUint64(refs[8:], 10000)
	long := func(prefix string, n int) []byte { return append(b(prefix), bytes.Repeat(b("i"), n)...) }
	val := journal.Record{Type: forgedValue, Payload: bytes.Repeat(b("v"), 700)}

	tests := []struct {
		name string
		recs []journal.Record
		want string // in the error; "" means the batch is one the writer builds: Open succeeds
	}{
		// Control: a forged batch the writer could have built replays.
		{"put", []journal.Record{batchRecord(putOp(b("u/ix"), b("x"), b("y")))}, ""},
		{"namespace put", []journal.Record{batchRecord(putOp(long("abcdefgh/", 248), b("x"), b("y")))}, ""},

		{"drop k/segrefs", []journal.Record{batchRecord(dropOp(b("k/segrefs")))}, `tree "k/segrefs"`},
		{"drop k/segrefs after a good op", []journal.Record{batchRecord(
			putOp(b("u/ix"), b("x"), b("y")), dropOp(b("k/segrefs")))}, `op 1: tree "k/segrefs"`},
		{"put k/segrefs, malformed", []journal.Record{batchRecord(putOp(b("k/segrefs"), seg1, b("\x00\x00\x00\x01")))}, `tree "k/segrefs"`},
		{"put k/segrefs, well-formed", []journal.Record{batchRecord(putOp(b("k/segrefs"), seg1, refs))}, `tree "k/segrefs"`},
		{"put k/segrefs, bad tag", []journal.Record{batchRecord(putOp(b("k/segrefs"), seg1, append([]byte{9}, refs...)))}, `tree "k/segrefs"`},
		{"delete k/segrefs", []journal.Record{batchRecord(deleteOp(b("k/segrefs"), seg1))}, `tree "k/segrefs"`},
		{"journal put k/segrefs", []journal.Record{val, batchRecord(putJournalOp(b("k/segrefs"), seg1, 0, 700))}, `tree "k/segrefs"`},
		{"move k/segrefs", []journal.Record{val, batchRecord(moveOp(b("k/segrefs"), seg1, 0, 700,
			journal.Location{Segment: 1, Offset: 64}))}, `tree "k/segrefs"`},
		{"drop another engine tree", []journal.Record{batchRecord(dropOp(b("k/other")))}, `tree "k/other"`},
		{"namespace too long", []journal.Record{batchRecord(putOp(b("zzzzzzzzzzz/x"), b("zz"), b("hi")))}, "unknown namespace"},
		{"namespace not a-z0-9", []journal.Record{batchRecord(putOp(b("B/x"), b("zz"), b("hi")))}, "unknown namespace"},
		{"no namespace", []journal.Record{batchRecord(deleteOp(b("nosuchtree"), b("zz")))}, "not a namespace's index"},
		{"empty index name", []journal.Record{batchRecord(dropOp(b("u/")))}, "not a namespace's index"},
		{"empty namespace", []journal.Record{batchRecord(dropOp(b("/x")))}, "unknown namespace"},
		{"tree name of 258 bytes", []journal.Record{batchRecord(putOp(long("u/", 256), b("x"), b("y")))}, "tree name of 258 bytes"},
		{"namespace tree name of 258 bytes", []journal.Record{batchRecord(dropOp(long("abcdefgh/", 249)))}, "tree name of 258 bytes"},
		{"key of 600 bytes", []journal.Record{batchRecord(putOp(b("u/stress"), bytes.Repeat(b("k"), 600), b("hi")))}, "key of 600 bytes"},
		{"key of 513 bytes", []journal.Record{batchRecord(deleteOp(b("u/stress"), bytes.Repeat(b("k"), 513)))}, "key of 513 bytes"},
		{"journal put, key of 513 bytes", []journal.Record{val, batchRecord(putJournalOp(b("u/stress"), bytes.Repeat(b("k"), 513), 0, 700))}, "key of 513 bytes"},
		{"empty key", []journal.Record{batchRecord(putOp(b("u/stress"), nil, b("hi")))}, "key of 0 bytes"},
		// A value kept in the journal: the batch's size must be its
		// record's (the index would hold a reference that reads short or
		// long, and segment refs counting bytes that are not there).
		{"journal put", []journal.Record{val, batchRecord(putJournalOp(b("u/stress"), b("jk"), 0, 700))}, ""},
		{"journal put, size unlike its record", []journal.Record{val, batchRecord(putJournalOp(b("u/stress"), b("jk"), 0, 699))}, "holds 700 bytes, batch says 699"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := base.Clone()
			loc := forge(t, mem, segOpts(nil).SegmentSize, 0, tc.recs...)
			if tc.want != "" {
				requireRefused(t, mem, segOpts, loc, tc.want)
				return
			}
			db, err := kdb.Open("/db", segOpts(mem))
			if err != nil {
				t.Fatalf("a batch the writer could build: %v", err)
			}
			if _, err := db.Check(); err != nil {
				t.Error(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}

	// An inline value over MaxValueSize: the journal's records must be large
	// enough to hold it (16 MiB records need segments of 64 MiB).
	t.Run("value over MaxValueSize", func(t *testing.T) {
		bigOpts := func(fs vfs.FS) *kdb.Options {
			return &kdb.Options{FS: fs, SegmentSize: 64 << 20, CheckpointInterval: -1}
		}
		mem := vfs.NewMem()
		db, err := kdb.Open("/db", bigOpts(mem))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Put("ix", []byte("a"), make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		loc := forge(t, mem, 64<<20, 16<<20, batchRecord(putOp(b("u/ix"), b("x"), make([]byte, kdb.MaxValueSize+1))))
		requireRefused(t, mem, bigOpts, loc, fmt.Sprintf("value of %d bytes", kdb.MaxValueSize+1))
	})
}

// TestOpen_ReplaysEveryBatchTheWriterBuilds: the refusals of forged
// batches never refuse one the writer builds. A store is written with
// every kind of batch (inline and journal puts, overwrites, deletes, index
// drops, a delete and a drop of what does not exist, namespaces with
// broker-shaped tree names, the longest key and tree names, transactions,
// ordered and deferred commits, compaction's moves), all after the last
// checkpoint, and the process dies: the reopen replays all of it and finds
// what was written.
func TestOpen_ReplaysEveryBatchTheWriterBuilds(t *testing.T) {
	opts := func(fs vfs.FS) *kdb.Options {
		return &kdb.Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1, CheckpointBytes: 1 << 40,
			CheckpointDirtyPages: 1 << 20}
	}
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", opts(mem))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := db.Namespace("b")
	if err != nil {
		t.Fatal(err)
	}
	longNS, err := db.Namespace("abcdefgh")
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		ns         *kdb.Namespace // nil: the user indexes
		index, key string
	}
	want := map[entry][]byte{} // nil: deleted
	write := func(b *kdb.Batch) {
		t.Helper()
		if err := db.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	val := func(i, n int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, n) }
	id := func(n uint64) string { return string(binary.BigEndian.AppendUint64(nil, n)) }

	// Values in the journal, dense in their segments, then a checkpoint:
	// its compaction pass finds nothing to move.
	for i := range 48 {
		k := fmt.Sprintf("big%02d", i)
		if err := db.Put("big", []byte(k), val(i, 4096)); err != nil {
			t.Fatal(err)
		}
		want[entry{nil, "big", k}] = val(i, 4096)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Everything from here on is replayed. Most values of the old segments
	// are overwritten (inline) or deleted, so that compaction moves the few
	// left forward.
	for i := range 48 {
		k := fmt.Sprintf("big%02d", i)
		switch {
		case i%12 == 0:
		case i%2 == 0:
			if err := db.Delete("big", []byte(k)); err != nil {
				t.Fatal(err)
			}
			want[entry{nil, "big", k}] = nil
		default:
			if err := db.Put("big", []byte(k), val(i, 10)); err != nil {
				t.Fatal(err)
			}
			want[entry{nil, "big", k}] = val(i, 10)
		}
	}
	moved, err := db.Compact()
	if err != nil {
		t.Fatal(err)
	}
	if moved == 0 {
		t.Fatal("compaction moved nothing: the replay would not see a move")
	}

	// User indexes: a batch of every kind, the longest key and index name.
	b := kdb.NewBatch()
	longIndex := strings.Repeat("i", kdb.MaxIndexNameSize)
	longKey := strings.Repeat("k", kdb.MaxKeySize)
	b.Put("t", []byte("inline"), []byte("v"))
	b.Put("t", []byte("journal"), val(1, 3000))
	b.Put(longIndex, []byte(longKey), val(2, 600))
	b.Put("gone", []byte("x"), []byte("y"))
	b.Delete("t", []byte("never"))
	b.Delete("nosuchindex", []byte("x"))
	b.DropIndex("nosuchindex")
	write(b)
	want[entry{nil, "t", "inline"}] = []byte("v")
	want[entry{nil, "t", "journal"}] = val(1, 3000)
	want[entry{nil, longIndex, longKey}] = val(2, 600)
	b = kdb.NewBatch()
	b.DropIndex("gone")
	b.Put("t", []byte("empty"), nil)
	write(b)
	want[entry{nil, "gone", "x"}] = nil
	want[entry{nil, "t", "empty"}] = []byte{}

	// Namespace "b", shaped like the broker's store (FORMAT.md §5.6): its
	// trees named with raw big-endian ids, message bodies in the journal,
	// a purge (drops) and acks (deletes).
	for d := uint64(1); d <= 3; d++ {
		b = ns.NewBatch()
		b.Put("dests", append([]byte{1}, fmt.Sprintf("q%d", d)...), make([]byte, 32))
		b.Put("ctr", []byte("ids"), binary.LittleEndian.AppendUint64(nil, d+1))
		for seq := uint64(1); seq <= 4; seq++ {
			k := id(seq)
			b.Put("m/"+id(d), []byte(k), val(int(seq), 100+int(seq)*300))
			b.Put("h/"+id(d), []byte(k), []byte("\x01\x00\x00\x00\x10\x00\x00\x00m"))
			b.Put("q/"+id(d+10), []byte(k), nil)
			want[entry{ns, "m/" + id(d), k}] = val(int(seq), 100+int(seq)*300)
			want[entry{ns, "q/" + id(d+10), k}] = []byte{}
		}
		write(b)
	}
	b = ns.NewBatch()
	b.DropIndex("m/" + id(2))
	b.DropIndex("h/" + id(2))
	b.DropIndex("q/" + id(12))
	b.Delete("q/"+id(11), []byte(id(1)))
	b.Delete("m/"+id(3), []byte(id(4)))
	write(b)
	for seq := uint64(1); seq <= 4; seq++ {
		want[entry{ns, "m/" + id(2), id(seq)}] = nil
		want[entry{ns, "q/" + id(12), id(seq)}] = nil
	}
	want[entry{ns, "q/" + id(11), id(1)}] = nil
	want[entry{ns, "m/" + id(3), id(4)}] = nil

	// The longest tree name of the longest namespace (257 bytes).
	b = longNS.NewBatch()
	nsIndex := strings.Repeat("n", kdb.MaxIndexNameSize+1-len("abcdefgh"))
	b.Put(nsIndex, []byte(longKey), val(3, 2000))
	write(b)
	want[entry{longNS, nsIndex, longKey}] = val(3, 2000)

	// Transactions: Update, Submit, Defer.
	if err := ns.Update(func(tx *kdb.Txn) error {
		if err := tx.Put("tx", []byte("x1"), val(4, 800)); err != nil {
			return err
		}
		if err := tx.PutOwned("tx", []byte("x2"), []byte("owned")); err != nil {
			return err
		}
		if err := tx.Delete("m/"+id(1), []byte(id(1))); err != nil {
			return err
		}
		return tx.DropIndex("h/" + id(3))
	}); err != nil {
		t.Fatal(err)
	}
	want[entry{ns, "tx", "x1"}] = val(4, 800)
	want[entry{ns, "tx", "x2"}] = []byte("owned")
	want[entry{ns, "m/" + id(1), id(1)}] = nil
	c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte("submitted"), val(5, 900)) })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	want[entry{nil, "t", "submitted"}] = val(5, 900)
	done := make(chan error, 1)
	if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("t", []byte("deferred"), []byte("d")) },
		func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want[entry{nil, "t", "deferred"}] = []byte("d")

	img := mem.Clone() // the process dies here: everything above is replayed
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	check := func(db *kdb.DB) {
		t.Helper()
		for e, v := range want {
			get := db.Get
			if e.ns != nil {
				n, err := db.Namespace(e.ns.Name())
				if err != nil {
					t.Fatal(err)
				}
				get = n.Get
			}
			got, err := get(e.index, []byte(e.key))
			switch {
			case v == nil && !errors.Is(err, kdb.ErrNotFound):
				t.Errorf("%v %q %q: %d bytes, %v; want deleted", e.ns != nil, e.index, e.key, len(got), err)
			case v != nil && (err != nil || !bytes.Equal(got, v)):
				t.Errorf("%v %q %q: %d bytes, %v; want %d bytes", e.ns != nil, e.index, e.key, len(got), err, len(v))
			}
		}
		if _, err := db.Check(); err != nil {
			t.Fatal(err)
		}
	}
	for _, ro := range []bool{true, false} {
		o := opts(img)
		o.ReadOnly = ro
		db, err := kdb.Open("/db", o)
		if err != nil {
			t.Fatalf("read-only %v: %v", ro, err)
		}
		if n := db.Recovery().RecordsReplayed; n < 60 {
			t.Errorf("read-only %v: %d records replayed, want every write since the checkpoint", ro, n)
		}
		check(db)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
