package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStress_RefusesForeignAndNestedDirs: 'kdbtool stress DIR' wrote a
// store into a directory holding another program's files, and into a new
// directory inside another store's directory (an outside tester's script),
// which demo and import refuse: the README says stress writes only into a
// new store. Now it refuses both the same way, with the same checks: exit 2,
// "holds config.json, which is not a store's file", and "is inside the
// store ... a store's directory holds only the store's own files", nothing
// written, no key printed (in a nested directory not even the directory
// made). The demo refuses a DIR inside a store too. Stress into its own
// store, again, and into an empty directory or one holding only the demo's
// mark, still writes.
func TestStress_RefusesForeignAndNestedDirs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	app := filepath.Join(root, "app")
	if err := os.Mkdir(app, 0o750); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"config.json": `{"x":1}`, "notes.txt": "hi"} {
		if err := os.WriteFile(filepath.Join(app, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := runTool(t, "stress", "--count", "5", app)
	if code != exitUsage || out != "" || !strings.Contains(errs, app+" holds config.json, which is not a store's file") {
		t.Errorf("stress into a directory of another program's files: exit %d, stdout %q, stderr %q; want exit 2 naming config.json", code, out, errs)
	}
	if names := dirNames(t, app); !slices.Equal(names, []string{"config.json", "notes.txt"}) {
		t.Errorf("stress refused %s but it holds %q now", app, names)
	}
	// With --json the refusal is one document on stderr.
	code, out, errs = runTool(t, "stress", "--json", "--count", "5", app)
	if code != exitUsage || out != "" || !strings.Contains(errs, `"error"`) || !strings.Contains(errs, "not a store's file") {
		t.Errorf("stress --json into %s: exit %d, stdout %q, stderr %q", app, code, out, errs)
	}

	own := filepath.Join(root, "own")
	for range 2 {
		if code, out, errs := runTool(t, "stress", "--count", "5", own); code != exitOK || strings.Count(out, "\n") != 5 {
			t.Fatalf("stress into its own store: exit %d, stdout %q, stderr %q", code, out, errs)
		}
	}
	real, err := filepath.EvalSymlinks(own)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(own, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, own)
	for _, nested := range []string{filepath.Join(own, "nested"), filepath.Join(own, "a", "b"), filepath.Join(root, "link", "nested")} {
		code, out, errs := runTool(t, "stress", "--count", "5", nested)
		if code != exitUsage || out != "" || !strings.Contains(errs, "is inside the store "+real) ||
			!strings.Contains(errs, "a store's directory holds only the store's own files") {
			t.Errorf("stress into %s: exit %d, stdout %q, stderr %q; want exit 2: inside the store %s", nested, code, out, errs, real)
		}
	}
	code, _, errs = runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", filepath.Join(own, "demo"))
	if code != exitUsage || !strings.Contains(errs, "is inside the store "+real) {
		t.Errorf("demo inside a store: exit %d, stderr %q; want exit 2: inside the store %s", code, errs, real)
	}
	if after := dirNames(t, own); !slices.Equal(before, after) {
		t.Errorf("refused stresses and demo inside %s: it held %q, now %q", own, before, after)
	}

	marked := filepath.Join(root, "marked")
	if err := markDemoDir(marked); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{t.TempDir(), marked} {
		if code, out, errs := runTool(t, "stress", "--count", "5", dir); code != exitOK || strings.Count(out, "\n") != 5 {
			t.Errorf("stress into %s: exit %d, stdout %q, stderr %q", dir, code, out, errs)
		}
	}
}
