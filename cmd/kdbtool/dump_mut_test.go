package main

// Tests added by mutation testing of kdbtool dump: each guards a flag
// check or an output field that a deliberate breakage of dump.go changed
// without any other test failing.

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// TestMut_DumpQueueOverSeveralPages guards dumpDest's paging (dump.go,
// "from = m.Seq + 1"): it reads a destination 1000 messages at a time, and
// each page starts after the last message of the one before, so a queue of
// more than a page is listed once each, in order, and body_size is each
// body's size.
func TestMut_DumpQueueOverSeveralPages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	br := brokerOf(db)
	const n = 2100
	for i := 0; i < n; i++ {
		m := &broker.Message{ID: fmt.Sprintf("m%d", i), ProducerID: "p", ProducerSeq: uint64(i + 1), Body: make([]byte, i%7)}
		if _, err := br.Send(broker.Queue, "q", m); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "dump", "--json", "--queue", "q", "--limit", "0", dir)
	msgs, _ := m["messages"].([]any)
	if code != exitOK || len(msgs) != n {
		t.Fatalf("dump --limit 0 of %d messages: exit %d, %d messages", n, code, len(msgs))
	}
	for i, x := range msgs {
		mm := x.(map[string]any)
		if mm["seq"] != float64(i+1) || mm["id"] != fmt.Sprintf("m%d", i) || mm["body_size"] != float64(i%7) ||
			mm["producer_id"] != "p" || mm["producer_seq"] != float64(i+1) {
			t.Fatalf("message %d: %v; want seq %d, id m%d, body_size %d, producer p/%d", i, mm, i+1, i, i%7, i+1)
		}
	}
	if m["next_seq"] != float64(0) {
		t.Errorf("next_seq %v after a dump of everything", m["next_seq"])
	}
}

// TestMut_DumpFlagUsage guards dump's flag checks (dump.go): a negative
// --limit, --sub without --topic, and a --start that is not a sequence
// number (for a destination) or not hex (with --hex) are usage errors
// (exit 2), not a listing or "problems found".
func TestMut_DumpFlagUsage(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 10)
	for _, args := range [][]string{
		{"--queue", "orders", "--limit", "-1"},
		{"--index", "users", "--limit", "-5"},
		{"--queue", "orders", "--sub", "audit"},
		{"--index", "users", "--sub", "audit"},
		{"--queue", "orders", "--start", "two"},
		{"--topic", "events", "--start", "-1"},
		{"--index", "users", "--hex", "--start", "zz"},
	} {
		code, out, _ := runTool(t, append(append([]string{"dump"}, args...), dir)...)
		if code != exitUsage {
			t.Errorf("dump %q: exit %d, want %d\n%s", args, code, exitUsage, out)
		}
	}
}
