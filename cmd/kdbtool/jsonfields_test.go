package main

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// TestJSON_CleanStoreHasEveryDocumentedField: inspect --json left out the
// fields the README documents when they were empty or false (omitempty):
// on a clean store there was no "problems" key at all (while check and
// repair print "problems": []), nor free_list.reason, first_lied_page,
// lie_reason, journal.torn_at, torn_before_replay, error, store.error,
// meta_slots[].unwritten, error; check --json had no journal_not_checked.
// A script reading d["problems"] failed on a healthy store. Every field
// the README documents is present, and every list is a list ([], never
// null).
func TestJSON_CleanStoreHasEveryDocumentedField(t *testing.T) {
	// Each path is a field the README documents; "x[]" is a list whose
	// elements (the first, if any) have the fields after it; a path
	// ending in "[]" must be a list.
	inspect := []string{
		"data_size", "recovery_pending",
		"meta.checkpoint_id", "meta.seq", "meta.page_size", "meta.page_count", "meta.root", "meta.replay_segment", "meta.replay_offset",
		"meta_slots[].slot", "meta_slots[].intact", "meta_slots[].unwritten", "meta_slots[].error", "meta_slots[].seq",
		"meta_slots[].checkpoint_id", "meta_slots[].page_count",
		"free_list.present", "free_list.intact", "free_list.checkpoint_id", "free_list.matches_meta", "free_list.free_pages",
		"free_list.ranges", "free_list.open_would", "free_list.trusted_file", "free_list.reason", "free_list.files[]",
		"free_list.lied_pages", "free_list.first_lied_page", "free_list.lie_reason", "free_list.damaged_lied_pages",
		"free_list.beyond_end_lied_pages",
		"redo.present", "redo.size", "redo.would_apply", "redo.pages", "redo.ignored",
		"journal.segments[].id", "journal.segments[].name", "journal.segments[].size", "journal.segments[].first",
		"journal.segments[].last", "journal.segments[].end", "journal.segments[].sealed", "journal.segments[].replay",
		"journal.records", "journal.batches", "journal.tail", "journal.torn_bytes", "journal.torn_at",
		"journal.torn_before_replay", "journal.records_after_checkpoint", "journal.error",
		"store.as_of_checkpoint", "store.indexes[].name", "store.indexes[].keys",
		"store.destinations[].kind", "store.destinations[].name", "store.destinations[].count", "store.destinations[].bytes",
		"store.destinations[].next_seq", "store.destinations[].subscriptions[]", "store.prepared[]", "store.error",
		"leftovers[]", "problems[]",
	}
	check := []string{"ok", "problems[]", "index", "journal_records", "journal_bytes", "journal_checked", "journal_not_checked"}
	repair := []string{"apply", "problems[]", "actions[]", "unfixable[]", "saved[]", "recovery", "after", "ok", "done", "error", "lost", "lost_bytes", "leftovers[]"}

	for _, s := range []struct{ name, dir string }{
		{"a store with an index, a queue and a topic", makeStore(t, 300)},
		{"a new empty store", emptyStore(t)},
	} {
		for _, c := range []struct {
			args   []string
			fields []string
		}{
			{[]string{"inspect", "--json", s.dir}, inspect},
			{[]string{"check", "--json", s.dir}, check},
			{[]string{"repair", "--json", s.dir}, repair},
		} {
			code, m := runJSON(t, c.args...)
			if code != exitOK {
				t.Errorf("%s: kdbtool %s: exit %d, want 0 (a clean store)", s.name, c.args[0], code)
			}
			for _, f := range c.fields {
				requireField(t, s.name+": "+c.args[0], m, f)
			}
			if ps, _ := m["problems"].([]any); len(ps) != 0 {
				t.Errorf("%s: kdbtool %s: problems %v on a clean store", s.name, c.args[0], ps)
			}
		}
	}
}

// requireField fails unless the decoded document v has the field at path
// (as TestJSON_CleanStoreHasEveryDocumentedField writes them).
func requireField(t *testing.T, what string, v any, path string) {
	t.Helper()
	name, rest, _ := strings.Cut(path, ".")
	list := strings.HasSuffix(name, "[]")
	name = strings.TrimSuffix(name, "[]")
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s: %s: %v is not an object", what, path, v)
		return
	}
	f, ok := m[name]
	if !ok {
		t.Errorf("%s: no field %q (of %s) in %v", what, name, path, keys(m))
		return
	}
	if !list {
		if rest != "" {
			requireField(t, what+" "+name, f, rest)
		}
		return
	}
	l, ok := f.([]any)
	if !ok {
		t.Errorf("%s: %s is %v, not a list", what, name, f)
		return
	}
	if rest != "" && len(l) > 0 {
		requireField(t, what+" "+name+"[0]", l[0], rest)
	}
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// emptyStore returns the directory of a new store that holds nothing.
func emptyStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dumpAmbiguousStore returns a store whose index "x" holds k1 = the one
// byte 0xff and k2 = the six bytes "\xff" (quote, backslash, x, f, f,
// quote), and whose queue "q" holds those two as bodies, of messages with
// no producer and no properties.
func dumpAmbiguousStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"\xff", `"\xff"`} {
		if err := db.Put("x", []byte(fmt.Sprintf("k%d", i+1)), []byte(v)); err != nil {
			t.Fatal(err)
		}
		if _, err := brokerOf(db).Send(broker.Queue, "q", &broker.Message{ID: fmt.Sprintf("m%d", i+1), Body: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestJSON_DumpHasEveryDocumentedField: dump --json left out the fields
// the README lists when they were empty (omitempty): an empty listing had
// no "keys" or "messages", the last page no "next" or "next_seq", a
// message no producer_id, producer_seq or properties, and without
// --values there was no value or body. A script reading d["keys"] failed.
// Every listed field is present: [] for an empty listing, "" or 0 for
// next at the end, {} for no properties, null for value and body (and
// their _hex) without --values.
func TestJSON_DumpHasEveryDocumentedField(t *testing.T) {
	t.Parallel()
	dir := dumpAmbiguousStore(t)
	index := []string{"keys[].key", "keys[].key_hex", "keys[].value_size", "keys[].value", "keys[].value_hex", "next", "next_hex"}
	dest := []string{"messages[].seq", "messages[].id", "messages[].id_hex", "messages[].producer_id", "messages[].producer_id_hex",
		"messages[].producer_seq", "messages[].properties", "messages[].properties_hex", "messages[].body_size", "messages[].body",
		"messages[].body_hex", "next_seq"}
	for _, c := range []struct {
		args   []string
		fields []string
		n      int // keys or messages listed
		next   any // next or next_seq
	}{
		{[]string{"--index", "x"}, index, 2, ""},
		{[]string{"--index", "x", "--values"}, index, 2, ""},
		{[]string{"--index", "x", "--limit", "1"}, index, 1, "k2"},
		{[]string{"--index", "x", "--start", "zzz"}, index, 0, ""},
		{[]string{"--queue", "q"}, dest, 2, 0.0},
		{[]string{"--queue", "q", "--values"}, dest, 2, 0.0},
		{[]string{"--queue", "q", "--limit", "1"}, dest, 1, 2.0},
		{[]string{"--queue", "q", "--start", "99"}, dest, 0, 0.0},
	} {
		code, m := runJSON(t, append(append([]string{"dump", "--json"}, c.args...), dir)...)
		what := fmt.Sprintf("dump %q", c.args)
		if code != exitOK {
			t.Errorf("%s: exit %d, want 0", what, code)
		}
		for _, f := range c.fields {
			requireField(t, what, m, f)
		}
		list, next := "keys", "next"
		if c.fields[0] != index[0] {
			list, next = "messages", "next_seq"
		}
		if l, _ := m[list].([]any); len(l) != c.n || m[next] != c.next {
			t.Errorf("%s: %d %s, %s %v; want %d and %v", what, len(l), list, next, m[next], c.n, c.next)
		}
		if l, _ := m[list].([]any); len(l) > 0 {
			first := l[0].(map[string]any)
			values := slices.Contains(c.args, "--values")
			for _, f := range []string{"value", "value_hex", "body", "body_hex"} {
				if v, ok := first[f]; ok && !values && v != nil {
					t.Errorf("%s: %s is %v without --values, want null", what, f, v)
				}
			}
			if p, ok := first["properties"]; ok {
				if pm, isMap := p.(map[string]any); !isMap || len(pm) != 0 {
					t.Errorf("%s: properties %v of a message that has none, want {}", what, p)
				}
			}
		}
	}
}

// TestDump_JSONValuesAreExact: dump --json printed a value that is not
// valid UTF-8 Go-quoted in "value", so the one byte 0xff and the six bytes
// "\xff" both printed as "\"\\xff\"" (only value_size told them apart),
// though the README says --json is exact. value (body) is the value as
// text only when it is valid UTF-8, else null, and value_hex (body_hex)
// always holds its bytes.
func TestDump_JSONValuesAreExact(t *testing.T) {
	t.Parallel()
	dir := dumpAmbiguousStore(t)
	want := []struct {
		text any
		hex  string
	}{{nil, "ff"}, {`"\xff"`, "225c78666622"}}
	for _, c := range []struct{ list, text, hex string }{{"keys", "value", "value_hex"}, {"messages", "body", "body_hex"}} {
		args := []string{"dump", "--json", "--values", "--index", "x", dir}
		if c.list == "messages" {
			args = []string{"dump", "--json", "--values", "--queue", "q", dir}
		}
		code, m := runJSON(t, args...)
		l, _ := m[c.list].([]any)
		if code != exitOK || len(l) != 2 {
			t.Fatalf("%q: exit %d, %v; want 2 %s", args, code, m, c.list)
		}
		for i, w := range want {
			e := l[i].(map[string]any)
			if e[c.text] != w.text || e[c.hex] != w.hex {
				t.Errorf("%q: %s[%d] has %s %#v, %s %#v; want %#v and %q", args, c.list, i, c.text, e[c.text], c.hex, e[c.hex], w.text, w.hex)
			}
		}
	}
}

// TestDump_MessageBytesExact: a message's ID, producer ID and properties
// are any bytes; dump --json gave those that are not UTF-8 as U+FFFD,
// losing them. Now id and producer_id are "" for them and id_hex and
// producer_id_hex give every one exactly; properties holds the pairs
// that are valid UTF-8 and properties_hex, when one is not, all of them in
// hex (null otherwise). The text output escapes the same bytes.
func TestDump_MessageBytesExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*broker.Message{
		{ID: "plain", ProducerID: "p", ProducerSeq: 1, Properties: map[string]string{"k": "v"}},
		{ID: "id\xfe", ProducerID: "p\xff", ProducerSeq: 2, Properties: map[string]string{"k": "v", "bad\xc3": "x", "ok": "\xff"}},
	}
	for _, m := range msgs {
		if _, err := brokerOf(db).Send(broker.Queue, "q", m); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, out := runJSON(t, "dump", "--json", "--queue", "q", dir)
	if code != exitOK {
		t.Fatalf("dump --json: exit %d: %v", code, out)
	}
	got := out["messages"].([]any)
	if len(got) != 2 {
		t.Fatalf("dump --json: %d messages, want 2", len(got))
	}
	hexOf := func(s string) string { return hex.EncodeToString([]byte(s)) }
	for i, m := range msgs {
		g := got[i].(map[string]any)
		wantID, wantProd := m.ID, m.ProducerID
		if !utf8.ValidString(wantID) {
			wantID = ""
		}
		if !utf8.ValidString(wantProd) {
			wantProd = ""
		}
		if g["id"] != wantID || g["id_hex"] != hexOf(m.ID) || g["producer_id"] != wantProd || g["producer_id_hex"] != hexOf(m.ProducerID) {
			t.Errorf("message %d: id %q id_hex %v producer_id %q producer_id_hex %v; want %q %s %q %s",
				i, g["id"], g["id_hex"], g["producer_id"], g["producer_id_hex"], wantID, hexOf(m.ID), wantProd, hexOf(m.ProducerID))
		}
		props := g["properties"].(map[string]any)
		if i == 0 {
			if g["properties_hex"] != nil || len(props) != 1 || props["k"] != "v" {
				t.Errorf("message 0: properties %v, properties_hex %v; want {k: v} and null", props, g["properties_hex"])
			}
			continue
		}
		if len(props) != 1 || props["k"] != "v" {
			t.Errorf("message 1: properties %v, want only the valid pair k=v", props)
		}
		ph, _ := g["properties_hex"].(map[string]any)
		if len(ph) != len(m.Properties) {
			t.Fatalf("message 1: properties_hex %v, want all %d properties", g["properties_hex"], len(m.Properties))
		}
		for k, v := range m.Properties {
			if ph[hexOf(k)] != hexOf(v) {
				t.Errorf("message 1: properties_hex[%s] = %v, want %s", hexOf(k), ph[hexOf(k)], hexOf(v))
			}
		}
	}
	code, text, errs := runTool(t, "dump", "--queue", "q", dir)
	if code != exitOK || strings.Contains(text, "\ufffd") || !strings.Contains(text, `"id\xfe"`) || !strings.Contains(text, `"p\xff"/2`) || !strings.Contains(text, `"bad\xc3"=x`) {
		t.Errorf("dump: exit %d, want the ID, producer and property escaped (\"id\\xfe\", \"p\\xff\"/2, \"bad\\xc3\"=x):\n%s%s", code, text, errs)
	}
}
