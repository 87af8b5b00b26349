package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportImport_Dash: "-" as FILE. export wrote a file named "-" in the
// current directory (exit 0), while verify --acked - reads standard input
// and import - failed; now export refuses it (its runs may be retried from
// the start, which a pipe cannot take back: exit 2, nothing written) and
// import reads the snapshot from standard input. Not parallel: it swaps
// os.Stdin.
func TestExportImport_Dash(t *testing.T) {
	dir := makeStore(t, 50)
	wd := t.TempDir()
	old, _ := os.Getwd()
	if err := os.Chdir(wd); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(old)
	code, out, errs := runTool(t, "export", dir, "-")
	if code != exitUsage || !strings.Contains(errs+out, "standard output") {
		t.Errorf("export DIR -: exit %d; want 2 and - refused\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(wd, "-")); err == nil {
		t.Errorf("export DIR - wrote a file named -")
	}

	snap := filepath.Join(t.TempDir(), "s.kdbx")
	if code, out, errs := runTool(t, "export", dir, snap); code != exitOK {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	f, err := os.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	stdin := os.Stdin
	os.Stdin = f
	dst := filepath.Join(t.TempDir(), "imported")
	code, out, errs = runTool(t, "import", "-", dst)
	os.Stdin = stdin
	if code != exitOK || !strings.Contains(out, "imported - into") {
		t.Fatalf("import - DIR: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runTool(t, "check", dst); code != exitOK {
		t.Errorf("check of the store imported from standard input: exit %d\n%s%s", code, out, errs)
	}
}
