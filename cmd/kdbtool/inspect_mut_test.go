package main

// Tests added by mutation testing of kdbtool inspect: each guards output
// fields that a deliberate breakage of inspect.go changed without any
// other test failing.

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/internal/checksum"
)

// TestMut_InspectDestinationFields guards inspect's store.destinations
// (inspect.go inspectIndexes): each destination's count, bytes, next_seq
// and its subscriptions' pending counts are the broker's (as
// Broker.Destinations and Subscriptions report them), field by field.
func TestMut_InspectDestinationFields(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 10)
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	br := brokerOf(db)
	want := map[string]map[string]any{}
	ds, err := br.Destinations()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		w := map[string]any{"kind": d.Kind.String(), "count": float64(d.Count), "bytes": float64(d.Bytes), "next_seq": float64(d.NextSeq)}
		if d.Kind == broker.Topic {
			subs, err := br.Subscriptions(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range subs {
				w["sub "+s.Name] = float64(s.Pending)
			}
		}
		want[d.Name] = w
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The store makeStore made: 5 messages in each, 5 pending for audit.
	if w := want["orders"]; w == nil || w["count"] != float64(5) || w["next_seq"] != float64(6) || w["bytes"] == float64(5) {
		t.Fatalf("queue orders: %v; the test needs 5 messages", w)
	}
	if w := want["events"]; w == nil || w["sub audit"] != float64(5) {
		t.Fatalf("topic events: %v; the test needs 5 pending for audit", w)
	}
	code, m := runJSON(t, "inspect", "--json", dir)
	if code != exitOK {
		t.Fatalf("inspect: exit %d", code)
	}
	got, _ := jget(t, m, "store.destinations").([]any)
	if len(got) != len(want) {
		t.Fatalf("store.destinations: %v, want %d", got, len(want))
	}
	for _, g := range got {
		d := g.(map[string]any)
		name, _ := d["name"].(string)
		w := want[name]
		if w == nil {
			t.Errorf("destination %q not in the store", name)
			continue
		}
		for _, f := range []string{"kind", "count", "bytes", "next_seq"} {
			if d[f] != w[f] {
				t.Errorf("destination %s: %s = %v, want %v", name, f, d[f], w[f])
			}
		}
		subs, _ := d["subscriptions"].([]any)
		for _, s := range subs {
			sm := s.(map[string]any)
			if k := "sub " + sm["name"].(string); sm["pending"] != w[k] {
				t.Errorf("destination %s: subscription %s pending = %v, want %v", name, sm["name"], sm["pending"], w[k])
			}
		}
	}
	// The human output says the same.
	_, out, _ := runTool(t, "inspect", dir)
	for _, line := range []string{
		fmt.Sprintf("  queue orders: 5 messages, %v bytes, next seq 6\n", want["orders"]["bytes"]),
		"    subscription audit: 5 pending\n",
	} {
		if !strings.Contains(out, "\n"+line) {
			t.Errorf("inspect (human): no line %q in\n%s", line, out)
		}
	}
}

// TestMut_InspectSegmentReplay guards journal.segments[].replay
// (inspect.go inspectJournal): a segment holds records recovery replays
// when its id is at or after the meta's replay segment, the replay
// segment itself included.
func TestMut_InspectSegmentReplay(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 300)
	code, m := runJSON(t, "inspect", "--json", dir)
	if code != exitOK {
		t.Fatalf("inspect: exit %d", code)
	}
	rs, _ := jget(t, m, "meta.replay_segment").(float64)
	segs, _ := jget(t, m, "journal.segments").([]any)
	found := false
	for _, s := range segs {
		sm := s.(map[string]any)
		id, _ := sm["id"].(float64)
		found = found || id == rs
		if want := id >= rs; sm["replay"] != want {
			t.Errorf("segment %v: replay = %v, want %v (replay segment %v)", sm["name"], sm["replay"], want, rs)
		}
	}
	if !found {
		t.Fatalf("no segment is the replay segment %v (%d segments): the test needs one", rs, len(segs))
	}
}

// lieOnePage rewrites dir's db.free as lieFreeFile does, but listing one
// page alone as free: page.
func lieOnePage(t *testing.T, dir string, page uint64) {
	t.Helper()
	name := filepath.Join(dir, "db.free")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	out := make([]byte, 72+16)
	copy(out[8:56], b[8:56])
	le.PutUint64(out[56:], 1) // one range
	le.PutUint64(out[64:], 1) // of one page
	le.PutUint64(out[72:], page)
	le.PutUint64(out[80:], 1)
	le.PutUint64(out[0:], checksum.Sum64(out[8:]))
	if err := os.WriteFile(name, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMut_InspectOneLiedPage guards inspect's report of a lying free list
// (inspect.go, "in.Lies > 0"): a db.free that lists a single page in use
// is an error (exit 1) like one that lists many, and free_list's fields
// describe that db.free (one range, one free page).
func TestMut_InspectOneLiedPage(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 500)
	// Find a page in use: the first one a lie about every page names.
	probe := t.TempDir()
	for name, b := range snapshotFiles(t, dir) {
		if err := os.WriteFile(filepath.Join(probe, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lieFreeFile(t, probe)
	_, m := runJSON(t, "inspect", "--json", probe)
	page, _ := jget(t, m, "free_list.first_lied_page").(float64)
	if page < 3 {
		t.Fatalf("no page in use found: %v", m["free_list"])
	}
	lieOnePage(t, dir, uint64(page))
	code, m := runJSON(t, "inspect", "--json", dir)
	ps := problemsOf(t, m, "problems")
	if code != exitProblems || !hasProblem(ps, "error free_list", "in use as free") {
		t.Fatalf("inspect of a db.free listing page %v (in use): exit %d, problems %q; want exit 1 and a free_list error", page, code, ps)
	}
	for f, want := range map[string]any{
		"free_list.lied_pages": float64(1), "free_list.first_lied_page": page,
		"free_list.ranges": float64(1), "free_list.free_pages": float64(1), "free_list.open_would": "trusted",
	} {
		if got := jget(t, m, f); got != want {
			t.Errorf("%s = %v, want %v", f, got, want)
		}
	}
	if code, _, _ := runTool(t, "check", dir); code != exitProblems {
		t.Errorf("check: exit %d, want %d", code, exitProblems)
	}
}

// TestMut_InspectPrepared guards inspect's store.prepared (inspect.go
// inspectIndexes): the prepared transactions' IDs, in the JSON and the
// human output.
func TestMut_InspectPrepared(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 10)
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	br := brokerOf(db)
	for _, xid := range []string{"x1", "x2"} {
		tx := br.BeginTx()
		if err := tx.Send(broker.Queue, "orders", &broker.Message{ID: "p-" + xid, Body: []byte("b")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Prepare(xid); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "inspect", "--json", dir)
	if p, _ := jget(t, m, "store.prepared").([]any); code != exitOK || len(p) != 2 || p[0] != "x1" || p[1] != "x2" {
		t.Fatalf("inspect: exit %d, store.prepared %v; want [x1 x2]", code, jget(t, m, "store.prepared"))
	}
	if _, out, _ := runTool(t, "inspect", dir); !strings.Contains(out, "\nprepared transactions: x1 x2\n") {
		t.Errorf("inspect (human): no prepared transactions line in\n%s", out)
	}
}
