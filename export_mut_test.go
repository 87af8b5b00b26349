package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/vfs"
)

// snapRec is one record of a hand-built snapshot (FORMAT.md §6).
type snapRec struct {
	kind   byte
	fields [][]byte
}

// buildSnapshot encodes recs as a snapshot with a valid trailer: the
// record count and the xxhash64 of every byte before it.
func buildSnapshot(recs ...snapRec) []byte {
	var b bytes.Buffer
	h := xxhash.New()
	w := io.MultiWriter(&b, h)
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:], exportMagic)
	binary.LittleEndian.PutUint32(hdr[4:], exportVersion)
	_, _ = w.Write(hdr[:])
	for _, r := range recs {
		_, _ = w.Write([]byte{r.kind})
		for _, f := range r.fields {
			_, _ = w.Write(binary.AppendUvarint(nil, uint64(len(f))))
			_, _ = w.Write(f)
		}
	}
	b.WriteByte(exportEnd)
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(recs)))
	_ = binary.Write(&b, binary.LittleEndian, h.Sum64())
	return b.Bytes()
}

// TestImport_MutationGuards guards Import's checks that
// TestImport_DamagedSnapshot does not reach: a damaged record count in the
// trailer (the checksum does not cover the trailer), a key of zero bytes in
// a snapshot whose checksum is valid (a snapshot no Export writes), an
// index without keys that is the snapshot's last tree (TestExport_Import
// GivesTheSameStore's empty index lies between others), and a tree without
// keys whose name replay refuses (Import's own check of tree names is all
// that stops it).
func TestImport_MutationGuards(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 256 << 10}
	src, err := Open("/src", o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := src.Put("a", fmt.Appendf(nil, "k%02d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBatch()
	b.Put("zz-last-and-empty", []byte("x"), []byte("y"))
	b.Delete("zz-last-and-empty", []byte("x"))
	if err := src.Write(b); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := src.Export(&snap); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	good := snap.Bytes()
	tree0 := func() []byte { return []byte(userTreePrefix + "a") }

	t.Run("empty last index", func(t *testing.T) {
		if _, err := Import("/dst-empty", bytes.NewReader(good), o); err != nil {
			t.Fatal(err)
		}
		dst, err := Open("/dst-empty", o)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		if names, err := dst.indexes(); err != nil || !contains(names, "zz-last-and-empty") || !contains(names, "a") {
			t.Fatalf("indexes after import: %v, %v", names, err)
		}
	})
	t.Run("record count in the trailer", func(t *testing.T) {
		b := flip(good, len(good)-16) // the low byte of the record count
		if _, err := Import("/dst-count", bytes.NewReader(b), o); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Import with a damaged record count: %v, want ErrCorrupt", err)
		}
	})
	// A tree outside every namespace, or an engine tree: the batches of a
	// keyed one would be refused, but a tree without keys is created in
	// the index directly, and the store Import leaves fails Check (and
	// TestCheck_CatchesATreeReplayWouldRefuse).
	for _, name := range []string{"stray", segRefsTree} {
		t.Run("tree replay would refuse "+name, func(t *testing.T) {
			dir := "/dst-refused-" + name[:1]
			// The keyless tree first: both names sort before tree0's, so
			// the snapshot is in name order and only the name is wrong.
			bad := buildSnapshot(snapRec{exportTree, [][]byte{[]byte(name)}},
				snapRec{exportTree, [][]byte{tree0()}}, snapRec{exportKV, [][]byte{[]byte("k"), []byte("v")}})
			_, err := Import(dir, bytes.NewReader(bad), o)
			if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "name order") {
				t.Fatalf("Import of tree %q: %v, want ErrCorrupt for its name", name, err)
			}
			if ok, err := vfs.Exists(mem, dir); ok || err != nil {
				t.Fatalf("%s exists (%v) after a refused import", dir, err)
			}
		})
	}
	t.Run("empty key", func(t *testing.T) {
		tree := []byte(userTreePrefix + "a")
		ok := buildSnapshot(snapRec{exportTree, [][]byte{tree}}, snapRec{exportKV, [][]byte{[]byte("k"), []byte("v")}})
		if _, err := Import("/dst-ok", bytes.NewReader(ok), o); err != nil {
			t.Fatalf("hand-built snapshot: %v", err)
		}
		bad := buildSnapshot(snapRec{exportTree, [][]byte{tree}}, snapRec{exportKV, [][]byte{{}, []byte("v")}})
		if _, err := Import("/dst-emptykey", bytes.NewReader(bad), o); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Import of a key of zero bytes: %v, want ErrCorrupt", err)
		}
	})
}

// TestExport_FailsOnAValueItCannotRead guards Export's handling of a value
// kept in the journal that cannot be read: the export fails naming the
// key. Carrying on wrote the key with an empty value into a snapshot whose
// checksum is valid, and Import restored it so (a silent loss).
func TestExport_FailsOnAValueItCannotRead(t *testing.T) {
	db := checkedStore(t)
	editIndex(t, db, string(treeName(userTreePrefix, "t")), func(tr *index.Tree) error {
		v, ok, err := tr.Get([]byte("big3"))
		if err != nil || !ok {
			return fmt.Errorf("big3: %v %v", ok, err)
		}
		v = bytes.Clone(v)
		binary.LittleEndian.PutUint64(v[5:], binary.LittleEndian.Uint64(v[5:])+8) // inside the record
		return tr.Put([]byte("big3"), v)
	})
	var snap bytes.Buffer
	_, err := db.Export(&snap)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "big3") {
		t.Fatalf("Export = %v, want ErrCorrupt naming key big3", err)
	}
}
