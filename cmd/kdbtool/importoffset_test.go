package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImport_DamageNamesOffset: a damaged or cut snapshot is refused with
// an error that names the file and the offset of the damage, as for a
// store's own files (import said only "snapshot: record type 254" or
// "snapshot: checksum mismatch", so an operator could not tell where the
// file went bad).
func TestImport_DamageNamesOffset(t *testing.T) {
	dir := makeStore(t, 30)
	snap := filepath.Join(t.TempDir(), "snap.kdbx")
	if code, _, errs := runTool(t, "export", dir, snap); code != exitOK {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	good, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	n := len(good)
	cases := []struct {
		name string
		mut  func([]byte) []byte
		want string
	}{
		{"record type", func(b []byte) []byte { b[8] ^= 0xff; return b }, "offset 8"},
		{"cut", func(b []byte) []byte { return b[:n/2] }, fmt.Sprintf("offset %d", n/2)},
		{"trailer", func(b []byte) []byte { b[n-1] ^= 0xff; return b }, fmt.Sprintf("offset %d", n-16)},
	}
	for _, c := range cases {
		bad := filepath.Join(t.TempDir(), "bad.kdbx")
		if err := os.WriteFile(bad, c.mut(append([]byte(nil), good...)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runTool(t, "import", bad, filepath.Join(t.TempDir(), "new"))
		if code != exitProblems {
			t.Errorf("%s: exit %d, want %d: %s", c.name, code, exitProblems, errs)
		}
		if !strings.Contains(errs, bad) || !strings.Contains(errs, c.want) {
			t.Errorf("%s: stderr %q, want the file and %q", c.name, errs, c.want)
		}
	}
}
