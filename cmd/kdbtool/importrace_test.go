package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestImport_TwoAtOnceExitCodes: two kdbtool imports into one DIR at once:
// one exits 0, the other exits 1 saying the store is in use (another
// import runs) or already holds a store, never 3; the store is whole and
// nothing is left beside it.
func TestImport_TwoAtOnceExitCodes(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 300)
	file := filepath.Join(t.TempDir(), "snap.kdbx")
	if code, _, errs := runTool(t, "export", src, file); code != exitOK {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	want := storeContent(t, src)
	for round := range 10 {
		parent := t.TempDir()
		dir := filepath.Join(parent, "dst")
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			codes [2]int
			errs  [2]string
		)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes[i], _, errs[i] = runTool(t, "import", file, dir)
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, code := range codes {
			switch {
			case code == exitOK:
				ok++
			case code == exitProblems && (strings.Contains(errs[i], "another import into it is running") || strings.Contains(errs[i], "holds a store")):
			default:
				t.Fatalf("round %d: import %d: exit %d, stderr %q; want 0, or 1 saying the store is in use or exists", round, i, code, errs[i])
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: exits %v (%q); want exactly one 0", round, codes, errs)
		}
		if storeContent(t, dir) != want {
			t.Fatalf("round %d: the imported store differs from the exported one", round)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Fatalf("round %d: %d entries beside the store", round, len(ents))
		}
	}
}
