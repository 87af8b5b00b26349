package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerify_EmptyAckedListIsAnError: 'verify --acked /dev/null DIR'
// printed "0 keys checked, 0 missing" and exited 0: an empty or lost
// acked file passed silently. A list that holds no key (empty, blank
// lines only, /dev/null, an empty pipe) is a usage error, exit 2, saying
// the file holds no keys, found before the store is opened (no recovery
// runs, nothing is written).
func TestVerify_EmptyAckedListIsAnError(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 10)
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty")
	blank := filepath.Join(tmp, "blank")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blank, []byte("\n  \n\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := fileStates(t, dir)
	for _, acked := range []string{empty, blank, os.DevNull} {
		for _, ro := range []bool{false, true} {
			args := []string{"verify", "--acked", acked, dir}
			if ro {
				args = append(args, "--read-only")
			}
			code, out, errs := runTool(t, args...)
			if code != exitUsage || out != "" || !strings.Contains(errs, "kdbtool verify: --acked "+acked+" holds no keys") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 saying the file holds no keys", args, code, out, errs)
			}
			code, m := runJSON(t, append(args, "--json")...)
			if msg, _ := m["error"].(string); code != exitUsage || !strings.Contains(msg, "holds no keys") {
				t.Errorf("%q --json: exit %d, %v; want exit 2 and an error saying the file holds no keys", args, code, m)
			}
		}
	}
	requireUntouched(t, "verify of an empty acked list", before, fileStates(t, dir))
	// One key is a list: checked.
	one := filepath.Join(tmp, "one")
	if err := os.WriteFile(one, []byte("\nnope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runTool(t, "verify", "--index", "users", "--acked", one, dir); code != exitProblems || !strings.Contains(out, "1 keys checked, 1 missing") {
		t.Errorf("verify of a one-key list: exit %d, stdout %q, stderr %q; want exit 1, the key missing", code, out, errs)
	}
}
