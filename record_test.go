package kdb

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

// TestEncodeBatch_SizeIsExact: encodedBatchSize predicts encodeBatch's
// output, including varints at their length boundaries, so that the
// payload is allocated once at its size.
func TestEncodeBatch_SizeIsExact(t *testing.T) {
	big := bytes.Repeat([]byte("v"), 1<<14)
	tests := []struct {
		name string
		ops  []op
	}{
		{"empty", nil},
		{"put", []op{{kind: opPut, tree: []byte("u/a"), key: []byte("k"), value: []byte("v")}}},
		{"varint boundaries", []op{
			{kind: opPut, tree: []byte("u/a"), key: bytes.Repeat([]byte("k"), 127), value: bytes.Repeat([]byte("v"), 128)},
			{kind: opPut, tree: []byte("u/a"), key: []byte("k"), value: big},
			{kind: opPutJournal, tree: []byte("u/b"), key: []byte("x"), ref: 127, size: 1 << 21},
		}},
		{"all kinds", []op{
			{kind: opPutJournal, tree: []byte("u/a"), key: []byte("k"), ref: 0, size: 700},
			{kind: opDelete, tree: []byte("u/b"), key: []byte("x")},
			{kind: opDropTree, tree: []byte("u/c")},
			{kind: opMoveJournal, tree: []byte("u/d"), key: []byte("m"), ref: 1, size: 900,
				from: journal.Location{Segment: 1 << 20, Offset: 1<<35 + 3}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc := encodeBatch(nil, tc.ops)
			if n := encodedBatchSize(tc.ops); n != len(enc) {
				t.Fatalf("encodedBatchSize = %d, encoded %d bytes", n, len(enc))
			}
		})
	}
	// 200 ops: the op count's varint takes two bytes.
	many := make([]op, 200)
	for i := range many {
		many[i] = op{kind: opDelete, tree: []byte("u/a"), key: []byte{byte(i)}}
	}
	if n, enc := encodedBatchSize(many), encodeBatch(nil, many); n != len(enc) {
		t.Fatalf("200 ops: encodedBatchSize = %d, encoded %d bytes", n, len(enc))
	}
}

// A move survives its encoding: kind, key, value reference and the
// reference it replaces; a move from segment 0 (which never exists) is
// corruption.
func TestDecodeBatch_Move(t *testing.T) {
	ops := []op{
		{kind: opPutJournal, tree: []byte("u/a"), key: []byte("k"), ref: 0, size: 700},
		{kind: opMoveJournal, tree: []byte("b/m"), key: []byte("x"), ref: 1, size: 513,
			from: journal.Location{Segment: 7, Offset: 4096}},
	}
	got, err := decodeBatch(encodeBatch(nil, ops), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Fatalf("decoded %+v, want %+v", got, ops)
	}
	bad := []op{{kind: opMoveJournal, tree: []byte("u/a"), key: []byte("k"), ref: 0, size: 1}}
	if _, err := decodeBatch(encodeBatch(nil, bad), 1); err == nil {
		t.Fatal("a move from segment 0 decoded")
	}
	if _, err := decodeBatch(encodeBatch(nil, ops), 1); err == nil {
		t.Fatal("a move's value record beyond the batch's decoded")
	}
}

// PutSize is what a Put adds to its batch record, in the namespace and in
// the user indexes alike.
func TestNamespace_PutSizeIsWhatAPutAdds(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace("broker")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		index string
		key   []byte
		vlen  int
	}{{"q/12345678", make([]byte, 8), 0}, {"x", []byte("k"), 300}, {string(make([]byte, 200)), make([]byte, 130), 20000}} {
		b := ns.NewBatch()
		b.Put("a", []byte("k0"), nil)
		before := encodedBatchSize(b.ops)
		b.Put(c.index, c.key, make([]byte, c.vlen))
		// One op more: the count's uvarint may grow too (not from 1 to 2).
		if got, want := ns.PutSize(c.index, c.key, c.vlen), encodedBatchSize(b.ops)-before; got != want {
			t.Errorf("PutSize(%d-byte index, %d-byte key, %d) = %d, want %d", len(c.index), len(c.key), c.vlen, got, want)
		}
	}
}
