package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerify_DamagedValueCountedAndGoesOn: a key whose value lies in a
// damaged journal record reads as damaged; verify lists it and checks the
// rest (it stopped at the first one, printing no totals), exit 1.
func TestVerify_DamagedValueCountedAndGoesOn(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "s")
	code, acked, errs := runTool(t, "stress", "--count", "60", "--size", "3000", "--segment-size", "65536", dir)
	if code != exitOK {
		t.Fatalf("stress: exit %d: %s", code, errs)
	}
	ackedFile := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(ackedFile, []byte(acked), 0o600); err != nil {
		t.Fatal(err)
	}
	flipBeforeReplayPosition(t, dir) // a record of the last segment, before the replay position Close left
	for _, ro := range []bool{true, false} {
		args := []string{"verify", "--json", "--acked", ackedFile, dir}
		if ro {
			args = append(args[:1], append([]string{"--read-only"}, args[1:]...)...)
		}
		code, m := runJSON(t, args...)
		damaged, _ := m["damaged"].([]any)
		if code != exitProblems || m["checked"] != float64(60) || len(damaged) != 1 || m["ok"] != false ||
			len(m["missing"].([]any)) != 0 || len(m["mismatched"].([]any)) != 0 {
			t.Errorf("%v: exit %d, %v: want exit 1, 60 checked, one damaged, none missing", args, code, m)
		}
	}
	code, out, _ := runTool(t, "verify", "--read-only", "--acked", ackedFile, dir)
	if code != exitProblems || !strings.Contains(out, "60 keys checked, 0 missing, 0 with a wrong value, 1 whose value is damaged") {
		t.Errorf("verify: exit %d:\n%s", code, out)
	}
}
