package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// TestStress_RefusesAnApplicationsStore: 'kdbtool stress DIR' on a closed
// application's store (a key-value program's indexes, a broker's
// namespace) wrote a thousand 1 KiB test values into it, exit 0. Now it
// writes only into a new store, one holding only its --index, or a demo's;
// any other store is exit 2 with nothing written, naming what it holds.
func TestStress_RefusesAnApplicationsStore(t *testing.T) {
	kv := t.TempDir()
	db, err := kdb.Open(kv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("users", []byte("alice"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	br := t.TempDir()
	if db, err = kdb.Open(br, nil); err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(broker.Queue, "orders", &broker.Message{ID: "o1", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dir, holds string }{
		{"key-value store", kv, `indexes ["users"]`},
		{"broker store", br, `namespaces ["` + broker.Namespace + `"]`},
		{"both", makeStore(t, 10), `indexes ["users"] and namespaces ["` + broker.Namespace + `"]`},
	} {
		code, out, errs := runTool(t, "stress", "--count", "20", c.dir)
		if code != exitUsage || out != "" || !strings.Contains(errs, c.holds) {
			t.Errorf("%s: stress exit %d, stdout %q, stderr %q; want exit 2, no keys, and an error naming %s", c.name, code, out, errs, c.holds)
		}
		db, err := kdb.Open(c.dir, &kdb.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.View(func(s *kdb.Snapshot) error {
			names, err := s.Indexes()
			if slices.Contains(names, "stress") {
				t.Errorf("%s: stress wrote its index into it: %q", c.name, names)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	// Its own store, again, and a demo's: written.
	own := t.TempDir()
	for range 2 {
		if code, out, errs := runTool(t, "stress", "--count", "20", own); code != exitOK || strings.Count(out, "\n") != 20 {
			t.Fatalf("stress into its own store: exit %d, %d keys, stderr %q", code, strings.Count(out, "\n"), errs)
		}
	}
	// A store the demo marked, whatever it holds (here the key-value one).
	if err := os.WriteFile(filepath.Join(kv, demoMark), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runTool(t, "stress", "--count", "20", kv); code != exitOK || strings.Count(out, "\n") != 20 {
		t.Fatalf("stress into a demo's store: exit %d, %d keys, stderr %q", code, strings.Count(out, "\n"), errs)
	}
}
