package kdb_test

import (
	"bytes"
	"testing"

	"github.com/kdb-project/kdb/journal"
)

// TestOpen_RefusesAValueRecordNoBatchRefersTo: value records at the end of
// the journal that no batch record follows are ErrCorrupt naming the first
// of them, for a writable and a read-only Open, and Open changes nothing. A
// batch's value records and its batch record are one journal batch, which a
// crash keeps or cuts whole, so no crash leaves them. Without the check the
// replay dropped them silently: the store opened as if they were not there.
func TestOpen_RefusesAValueRecordNoBatchRefersTo(t *testing.T) {
	base := segStore(t, 20, 2000, 5) // values of 2000 bytes stay in the journal
	val := journal.Record{Type: forgedValue, Payload: bytes.Repeat([]byte("v"), 700)}
	tests := []struct {
		name string
		recs []journal.Record
	}{
		{"a value record alone", []journal.Record{val}},
		{"after a whole batch in its journal batch", []journal.Record{
			val, batchRecord(putJournalOp([]byte("u/ix"), []byte("x"), 0, 700)), val}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := base.Clone()
			loc := forge(t, mem, segOpts(nil).SegmentSize, 0, tc.recs...)
			requireRefused(t, mem, segOpts, loc, "no batch record refers to")
		})
	}
}
