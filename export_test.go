package kdb

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// rawDump returns every tree of db but the engine's own, with every key and
// its resolved value, as "tree\x00key" -> value.
func rawDump(t *testing.T, db *DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.View(func(s *Snapshot) error {
		names, err := s.trees()
		if err != nil {
			return err
		}
		for _, name := range names {
			if string(name) == segRefsTree {
				continue
			}
			tr, err := s.openTree(name)
			if err != nil {
				return err
			}
			out[string(name)] = "(tree)"
			c := tr.cursor()
			for k, v, ok := c.first(); ok; k, v, ok = c.next() {
				val, err := db.resolve(v)
				if err != nil {
					return err
				}
				out[string(name)+"\x00"+string(k)] = string(val)
			}
			if c.err != nil {
				return c.err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExport_ImportGivesTheSameStore(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 256 << 10}
	db, err := Open("/src", o)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch()
	for i := 0; i < 300; i++ {
		b.Put("small", []byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprint(i)))
		b.Put("large", []byte(fmt.Sprintf("k%04d", i)), bytes.Repeat([]byte{byte(i)}, 700+i))
		if b.Len() >= 32 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	b.Put("emptied", []byte("x"), []byte("y"))
	b.Delete("emptied", []byte("x"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	// Namespace trees (what a layer such as the broker keeps; the broker's
	// own state through Export and Import is broker/export_import_test.go's):
	// small and journal-kept values, deletes, two indexes, one written with
	// Write and one with an ordered commit.
	ns, err := db.Namespace("n")
	if err != nil {
		t.Fatal(err)
	}
	nb := ns.NewBatch()
	for i := 0; i < 40; i++ {
		nb.Put("a", []byte(fmt.Sprintf("k%04d", i)), bytes.Repeat([]byte("n"), 20*i))
	}
	nb.Delete("a", []byte("k0003"))
	if err := db.Write(nb); err != nil {
		t.Fatal(err)
	}
	c, err := ns.Submit(func(tx *Txn) error { return tx.Put("b", []byte("x"), bytes.Repeat([]byte("z"), 900)) })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}

	var snap bytes.Buffer
	rep, err := db.Export(&snap)
	if err != nil {
		t.Fatal(err)
	}
	want := rawDump(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if rep.Keys == 0 || rep.Trees < 4 {
		t.Fatalf("export report %+v", rep)
	}

	irep, err := Import("/dst", bytes.NewReader(snap.Bytes()), o)
	if err != nil {
		t.Fatal(err)
	}
	if *irep != *rep {
		t.Fatalf("import read %+v, export wrote %+v", irep, rep)
	}
	dst, err := Open("/dst", o)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got := rawDump(t, dst)
	if len(got) != len(want) {
		t.Fatalf("%d entries imported, %d exported", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("entry %q: %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	if _, err := dst.Check(); err != nil {
		t.Fatal(err)
	}
	// The namespace reads back the same through its own API.
	dns, err := dst.Namespace("n")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := dns.Get("a", []byte("k0039")); err != nil || !bytes.Equal(v, bytes.Repeat([]byte("n"), 780)) {
		t.Fatalf("namespace value after import: %d bytes, %v", len(v), err)
	}
	if _, err := dns.Get("a", []byte("k0003")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted namespace key after import: %v", err)
	}
	if v, err := dns.Get("b", []byte("x")); err != nil || len(v) != 900 {
		t.Fatalf("ordered-commit value after import: %d bytes, %v", len(v), err)
	}
	if names, _ := dst.indexes(); !contains(names, "emptied") {
		t.Fatalf("empty index not imported: %v", names)
	}
	// A store that exists already is refused.
	if _, err := Import("/dst", bytes.NewReader(snap.Bytes()), o); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("import over a store: %v", err)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func (db *DB) indexes() ([]string, error) {
	var out []string
	err := db.View(func(s *Snapshot) error {
		var err error
		out, err = s.Indexes()
		return err
	})
	return out, err
}

func TestImport_DamagedSnapshot(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 256 << 10}
	db, err := Open("/src", o)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := db.Put("x", []byte(fmt.Sprint(i)), bytes.Repeat([]byte{1}, i*20)); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := db.Export(&snap); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	good := snap.Bytes()
	cases := map[string][]byte{
		"truncated":   good[:len(good)/2],
		"no trailer":  good[:len(good)-17],
		"bit flip":    flip(good, len(good)/3),
		"bad magic":   flip(good, 0),
		"extra bytes": append(append([]byte{}, good...), 0),
		"empty":       nil,
	}
	i := 0
	for name, b := range cases {
		i++
		_, err := Import(fmt.Sprintf("/dst%d", i), bytes.NewReader(b), o)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := Import("/ok", bytes.NewReader(good), o); err != nil {
		t.Fatal(err)
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0x40
	return c
}
