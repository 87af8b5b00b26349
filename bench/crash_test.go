package bench

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

const (
	crashEnvDir   = "KDB_BENCH_CRASH_DIR"
	crashEnvBytes = "KDB_BENCH_CRASH_BYTES"
)

// CrashWithJournal leaves dir as a real crash between checkpoints leaves
// it, with journalBytes of journal to replay: a child process (this test
// binary, TestCrashChild) opens the store, writes journalBytes of 1 KiB
// puts (values in the journal, each batch synced, no checkpoint), reports
// them acknowledged, and is SIGKILLed. Nothing is closed: no close mark,
// no final sync, the lock file left behind. The page cache keeps what the
// child wrote, as after a process crash. It returns the number of puts.
func CrashWithJournal(tb testing.TB, dir string, journalBytes int64) int {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvDir+"="+dir, crashEnvBytes+"="+strconv.FormatInt(journalBytes, 10))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	n := -1
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			n, _ = strconv.Atoi(v)
			break
		}
	}
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	if n < 0 {
		tb.Fatalf("the crash child did not report its writes; stderr:\n%s", stderr.String())
	}
	return n
}

// TestCrashChild is CrashWithJournal's child; it does nothing unless
// KDB_BENCH_CRASH_DIR is set. It writes, reports, and waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		return
	}
	journalBytes, _ := strconv.ParseInt(os.Getenv(crashEnvBytes), 10, 64)
	db, err := kdb.Open(dir, &kdb.Options{
		CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	val := make([]byte, 1024)
	b := kdb.NewBatch()
	n := 0
	for written := int64(0); written < journalBytes; {
		b.Reset()
		for range 256 {
			var k [16]byte
			binary.BigEndian.PutUint64(k[:], uint64(n))
			binary.LittleEndian.PutUint64(val, uint64(n))
			b.Put("replay", k[:], val)
			n++
			written += int64(len(val) + len(k) + 8)
		}
		if err := db.Write(b); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(3)
		}
	}
	fmt.Printf("acked %d\n", n)
	time.Sleep(time.Minute) // the parent kills us first
	os.Exit(4)
}
