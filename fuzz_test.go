package kdb

import (
	"errors"
	"testing"
)

// The decoders of what the root package reads back from the journal and the
// index never panic and report damage as ErrCorrupt (or ErrVersionMismatch).
// Their seed corpora run in every go test; go test -fuzz FuzzX . explores.

func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(nil, []op{{kind: opPut, tree: []byte("u/a"), key: []byte("k"), value: []byte("v")}}), 0)
	f.Add(encodeBatch(nil, []op{{kind: opPutJournal, tree: []byte("u/a"), key: []byte("k"), ref: 0, size: 700},
		{kind: opDelete, tree: []byte("u/b"), key: []byte("x")}, {kind: opDropTree, tree: []byte("u/c")}}), 1)
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f}, 0)
	f.Fuzz(func(t *testing.T, b []byte, nvalues int) {
		if nvalues < 0 || nvalues > 1<<16 {
			return
		}
		ops, err := decodeBatch(b, nvalues)
		if err != nil {
			return // decodeBatch's callers wrap its errors as ErrCorrupt
		}
		// What decodes re-encodes canonically (varints may not be canonical
		// in b), and that encoding decodes to itself.
		enc := encodeBatch(nil, ops)
		if n := encodedBatchSize(ops); n != len(enc) {
			t.Fatalf("encodedBatchSize = %d, encoded %d bytes", n, len(enc))
		}
		ops2, err := decodeBatch(enc, nvalues)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if got := encodeBatch(nil, ops2); string(got) != string(enc) {
			t.Fatalf("round trip: %x != %x", got, enc)
		}
	})
}

func FuzzDecodeAppMeta(f *testing.F) {
	f.Add(appMeta{replayBps: 1 << 20}.encode())
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeAppMeta(b); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersionMismatch) {
			t.Fatalf("error neither ErrCorrupt nor ErrVersionMismatch: %v", err)
		}
	})
}
