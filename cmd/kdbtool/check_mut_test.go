package main

// Tests added by mutation testing of kdbtool check: each guards an output
// field or a finding that a deliberate breakage of check.go removed
// without any other test failing.

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/journal"
)

// TestMut_CheckJournalCounts guards check's journal_records and
// journal_bytes (check.go checkJournal): they count every record of the
// journal and its payload bytes, in the JSON and in the human line.
func TestMut_CheckJournalCounts(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 300)
	var records, bytes int64
	j, _, err := journal.Open(dir, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Iterate(journal.Location{}, func(_ journal.Location, r journal.Record) error {
		records++
		bytes += int64(len(r.Payload))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if records == 0 || bytes == 0 {
		t.Fatalf("the store's journal holds %d records of %d bytes: the test needs some", records, bytes)
	}
	code, m := runJSON(t, "check", "--json", dir)
	if code != exitOK {
		t.Fatalf("check: exit %d", code)
	}
	if got := jget(t, m, "journal_records"); got != float64(records) {
		t.Errorf("journal_records = %v, want %d", got, records)
	}
	if got := jget(t, m, "journal_bytes"); got != float64(bytes) {
		t.Errorf("journal_bytes = %v, want %d", got, bytes)
	}
	code, out, _ := runTool(t, "check", dir)
	want := fmt.Sprintf("journal: %d records (%d payload bytes) verified\n", records, bytes)
	if code != exitOK || !strings.Contains(out, want) {
		t.Errorf("check: exit %d, want the line %q in\n%s", code, want, out)
	}
}

// TestMut_CheckFindsBrokerDamage guards check's run of the broker's own
// check (check.go checkIndex, broker.Check): a destination whose recorded
// message count disagrees with its messages is a problem of the index
// (exit 1), though every page, key and journal record is intact.
func TestMut_CheckFindsBrokerDamage(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 10)
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := db.Namespace(broker.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	// The destination record of queue "orders" (docs/FORMAT.md, broker
	// trees: kind u8 + name -> id, next seq, count, bytes, u64 LE each),
	// its count raised by one.
	key := append([]byte{byte(broker.Queue)}, "orders"...)
	if err := ns.Update(func(tx *kdb.Txn) error {
		v, err := tx.Get("dests", key)
		if err != nil {
			return err
		}
		if len(v) != 32 {
			return fmt.Errorf("destination record of %d bytes", len(v))
		}
		v = append([]byte(nil), v...)
		binary.LittleEndian.PutUint64(v[16:], binary.LittleEndian.Uint64(v[16:])+1)
		return tx.Put("dests", key, v)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "check", "--json", dir)
	ps := problemsOf(t, m, "problems")
	if code != exitProblems || jget(t, m, "ok") != false || !hasProblem(ps, "error index", "orders") {
		t.Fatalf("check of a queue whose count is one too high: exit %d, problems %q; want exit 1 and an index error naming it", code, ps)
	}
	if code, out, _ := runTool(t, "check", dir); code != exitProblems || !strings.Contains(out, "problems found") {
		t.Errorf("check (human): exit %d\n%s", code, out)
	}
}
