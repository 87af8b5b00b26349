package kdb

import (
	"bytes"
	"testing"
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
