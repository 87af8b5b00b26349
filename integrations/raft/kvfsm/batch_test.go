package kvfsm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// TestFSM_ApplyBatchLargerThanOneKdbBatch: raft hands ApplyBatch up to
// MaxAppendEntries (64) commands, which can hold more than one kdb batch
// takes (db.MaxBatchSize, a journal batch of SegmentSize/2): 64 puts of
// the example's largest value (1 MiB) on a store with default options. It
// must apply them all (it panicked: kdb refused the one transaction with
// "split the batch", and a restart replayed the same batch into the same
// panic). Also on a small store (SegmentSize 1 MiB, kdb batches of
// 256 KiB, so a MaxPutSize of 128 KiB) with values that fit one by one.
func TestFSM_ApplyBatchLargerThanOneKdbBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    *kdb.Options
		fsm     Options
		n, size int
	}{
		{"default-64x1MiB", nil, Options{}, 64, 1 << 20},
		{"seg1MiB-64x100KiB", &kdb.Options{SegmentSize: 1 << 20}, Options{MaxPutSize: 128 << 10}, 64, 100 << 10},
		{"seg1MiB-3000x300B", &kdb.Options{SegmentSize: 1 << 20}, Options{MaxPutSize: 128 << 10}, 3000, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "a")
			db, err := kdb.Open(dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(db, nil, tc.fsm)
			if err != nil {
				t.Fatal(err)
			}
			val := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, tc.size) }
			var logs []*raft.Log
			for i := 1; i <= tc.n; i++ {
				logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand,
					Data: EncodePut([]byte(fmt.Sprint("k", i)), val(i))})
			}
			var resp []any
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("ApplyBatch of %d puts of %d bytes panicked: %v", tc.n, tc.size, r)
					}
				}()
				resp = f.ApplyBatch(logs)
			}()
			for i, r := range resp {
				if r != nil {
					t.Fatalf("response %d: %v", i, r)
				}
			}
			if f.Applied() != uint64(tc.n) {
				t.Fatalf("applied %d, want %d", f.Applied(), tc.n)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = kdb.Open(dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			got := 0
			applied, err := All(db, func(k, v []byte) error {
				var i int
				fmt.Sscanf(string(k), "k%d", &i)
				if !bytes.Equal(v, val(i)) {
					return fmt.Errorf("key %s: wrong value", k)
				}
				got++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if applied != uint64(tc.n) || got != tc.n {
				t.Fatalf("after reopen: applied %d, %d keys; want %d", applied, got, tc.n)
			}
		})
	}
}

// TestFSM_ApplyBatchPutOverMaxPutSize: a put whose key and value are over
// the FSM's MaxPutSize (200 KiB, on a store with 1 MiB segments whose kdb
// batches take 256 KiB) is answered with kdb.ErrInvalid and applied as
// nothing; the entries around it, a put of exactly MaxPutSize among them,
// are applied and the applied index passes it.
func TestFSM_ApplyBatchPutOverMaxPutSize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const limit = 200 << 10
	f, err := Open(db, nil, Options{MaxPutSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	resp := f.ApplyBatch([]*raft.Log{put(1, "a", "1"),
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: EncodePut([]byte("big"), make([]byte, 300<<10))},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: EncodePut([]byte("at"), make([]byte, limit-2))},
		{Index: 4, Term: 1, Type: raft.LogCommand, Data: EncodePut([]byte("over"), make([]byte, limit-3))},
		put(5, "c", "3")})
	if resp[0] != nil || resp[2] != nil || resp[4] != nil {
		t.Fatalf("responses %v", resp)
	}
	for _, i := range []int{1, 3} {
		if err, ok := resp[i].(error); !ok || !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "MaxPutSize (204800)") {
			t.Fatalf("response to entry %d, over MaxPutSize: %v, want kdb.ErrInvalid naming MaxPutSize (204800)", i+1, resp[i])
		}
	}
	m, applied := contents(t, db)
	if len(m) != 3 || m["a"] != "1" || len(m["at"]) != limit-2 || m["c"] != "3" || applied != 5 || f.Applied() != 5 {
		t.Fatalf("state: %d keys, applied %d (%d)", len(m), applied, f.Applied())
	}
}
