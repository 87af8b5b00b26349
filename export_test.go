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
		names, err := s.tx.Trees()
		if err != nil {
			return err
		}
		for _, name := range names {
			if string(name) == segRefsTree {
				continue
			}
			tr, err := s.tx.OpenTree(name)
			if err != nil {
				return err
			}
			out[string(name)] = "(tree)"
			c := tr.Cursor()
			for k, v, ok := c.First(); ok; k, v, ok = c.Next() {
				val, err := db.resolve(v)
				if err != nil {
					return err
				}
				out[string(name)+"\x00"+string(k)] = string(val)
			}
			if err := c.Err(); err != nil {
				return err
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
	// Broker state: a queue with acked and kept messages, a topic with two
	// subscriptions at different positions, a prepared transaction.
	for i := 1; i <= 20; i++ {
		if _, err := db.Send(Queue, "q", &Message{ID: fmt.Sprint("m", i), ProducerID: "p", ProducerSeq: uint64(i), Body: bytes.Repeat([]byte("b"), 100*i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Ack(Queue, "q", 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if err := db.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		if _, err := db.Send(Topic, "t", &Message{ID: fmt.Sprint("t", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AckSub("t", "s1", 1, 2); err != nil {
		t.Fatal(err)
	}
	tx := db.BeginTx()
	if err := tx.Send(Queue, "q", &Message{ID: "prep", Body: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("xid-1"); err != nil {
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
	// The broker sees the same store: sequence numbers, pending counts,
	// the prepared transaction, and the producer audit.
	if p, err := dst.Pending("t", "s1"); err != nil || p != 3 {
		t.Fatalf("pending s1: %d, %v", p, err)
	}
	if x, err := dst.Prepared(); err != nil || len(x) != 1 || x[0] != "xid-1" {
		t.Fatalf("prepared: %v, %v", x, err)
	}
	if _, err := dst.Send(Queue, "q", &Message{ID: "again", ProducerID: "p", ProducerSeq: 5}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("producer audit lost: %v", err)
	}
	if err := dst.CommitPrepared("xid-1"); err != nil {
		t.Fatal(err)
	}
	if d, err := dst.Destination(Queue, "q"); err != nil || d.Count != 18 || d.NextSeq != 22 {
		t.Fatalf("queue after import and commit: %+v, %v", d, err)
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
