package main

import (
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
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
		"problems[]",
	}
	check := []string{"ok", "problems[]", "index", "journal_records", "journal_bytes", "journal_checked", "journal_not_checked"}
	repair := []string{"apply", "problems[]", "actions[]", "unfixable[]", "saved[]", "recovery", "after", "ok", "done", "error", "lost", "lost_bytes"}

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
