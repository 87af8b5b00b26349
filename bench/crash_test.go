package bench

import (
	"os"
	"strconv"
	"testing"
)

// TestCrashWriterChild is the child process of CrashWithJournal; it does
// nothing unless KDB_BENCH_CRASH_DIR is set. It writes the journal and
// waits to be killed.
func TestCrashWriterChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		return
	}
	n, err := strconv.ParseInt(os.Getenv(crashEnvBytes), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := crashWriter(dir, n); err != nil {
		t.Fatal(err)
	}
}
