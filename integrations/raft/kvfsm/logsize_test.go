package kvfsm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	raftkdb "github.com/kdb-project/kdb/integrations/raft"
)

// TestFSM_OpenRefusesPutsTheLogCannotHold: Open refuses a MaxPutSize whose
// largest put raft could not log in the node's raftkdb log (the raft entry
// of a put of MaxPutSize over the Store's MaxEntrySize), naming the largest
// it allows; that largest is taken, and the raft entry of a put of exactly
// it (with the shortest and the longest key) is stored. Before, Open took
// MaxPutSize kdb.MaxValueSize on a store with 64 MiB segments, and raft's
// StoreLogs refused such a put ("log entry 3 encodes to 8388650 bytes, over
// the store's MaxEntrySize 8388608"): the leader stepped down on each one
// instead of answering it with kdb.ErrInvalid. On small segments with a
// log namespace of 8 bytes the log, not the FSM's batch, is the tighter
// bound.
func TestFSM_OpenRefusesPutsTheLogCannotHold(t *testing.T) {
	for _, tc := range []struct {
		name        string
		segmentSize int64
		ns          string
		maxPut      int // an option over what the log holds
	}{
		{"64MiB segments, MaxValueSize", 64 << 20, raftkdb.DefaultNamespace, kdb.MaxValueSize},
		{"1MiB segments, 8-byte namespace", 1 << 20, "rrrrrrrr", 1<<18 - putOverhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := kdb.Open(filepath.Join(t.TempDir(), "a"), &kdb.Options{SegmentSize: tc.segmentSize})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			s, err := raftkdb.New(db, tc.ns)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			largest := s.MaxEntrySize() - entryOverhead
			if tc.maxPut <= largest {
				t.Fatalf("case error: MaxPutSize %d is within what the log holds (%d)", tc.maxPut, largest)
			}
			_, err = Open(db, s, Options{MaxPutSize: tc.maxPut})
			if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprint("at most ", largest)) {
				t.Fatalf("Open with MaxPutSize %d on a log whose MaxEntrySize is %d: %v, want kdb.ErrInvalid naming %d", tc.maxPut, s.MaxEntrySize(), err, largest)
			}
			f, err := Open(db, s, Options{MaxPutSize: largest})
			if err != nil {
				t.Fatalf("Open with MaxPutSize %d: %v", largest, err)
			}
			// The raft entries of puts of exactly MaxPutSize are logged and
			// applied.
			for i, klen := range []int{1, kdb.MaxKeySize} {
				key := bytes.Repeat([]byte{'k'}, klen)
				l := &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, AppendedAt: time.Now(),
					Data: EncodePut(key, make([]byte, largest-klen))}
				if err := s.StoreLog(l); err != nil {
					t.Fatalf("logging a put of MaxPutSize %d (key of %d bytes): %v", largest, klen, err)
				}
				if r := f.Apply(l); r != nil {
					t.Fatalf("applying a put of MaxPutSize %d (key of %d bytes): %v", largest, klen, r)
				}
			}
		})
	}
}
