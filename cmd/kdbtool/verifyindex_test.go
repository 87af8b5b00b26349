package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerify_IndexNotInStoreIsSaid: verify --index with a name the store
// has no index of (a typo, or the default "stress" for a store stress
// wrote with --index) reported every listed key "missing" (a false loss
// of every write) instead of saying the index does not exist.
func TestVerify_IndexNotInStoreIsSaid(t *testing.T) {
	dir := t.TempDir()
	code, acked, errs := runTool(t, "stress", "--count", "20", "--size", "16", "--index", "mine", dir)
	if code != exitOK {
		t.Fatalf("stress: exit %d: %s", code, errs)
	}
	list := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(list, []byte(acked), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runTool(t, "verify", "--index", "mine", "--acked", list, dir); code != exitOK {
		t.Fatalf("verify --index mine: exit %d: %s %s", code, out, errs)
	}
	for _, ro := range [][]string{nil, {"--read-only"}} {
		args := append(append([]string{"verify"}, ro...), "--acked", list, dir)
		code, out, errs := runTool(t, args...)
		if code != exitProblems {
			t.Fatalf("%v: exit %d for an index the store lacks, want %d", args, code, exitProblems)
		}
		if strings.Contains(out, "missing: ") || !strings.Contains(errs, `index "stress"`) || !strings.Contains(errs, "mine") {
			t.Errorf("%v: exit %d, stdout %q stderr %q: want it to say index \"stress\" is not in the store (which holds \"mine\"), not list every key missing", args, code, out, errs)
		}
	}
}
