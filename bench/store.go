package bench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// Dir returns the directory under which built stores are cached.
func Dir() string {
	if d := os.Getenv("KDB_BENCH_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "kdb-bench")
}

// BuildOptions are the options used to build the big stores: values inline
// in the B-tree (so the page file, not the journal, holds the data), no
// fsync while building (the build is not what is measured; the final Close
// checkpoints and syncs).
func BuildOptions() *kdb.Options {
	return &kdb.Options{
		ValueThreshold:       -1,
		Sync:                 kdb.UnsafeSyncNever,
		CheckpointInterval:   -1,
		CheckpointDirtyPages: 16384,
	}
}

// BuildStore returns the directory of a cached store whose db.data is at
// least size bytes, building it if needed: keys of 16 bytes with 16 KiB
// values in index "data". It is reused across runs; delete Dir() to rebuild.
func BuildStore(tb testing.TB, size int64) string {
	tb.Helper()
	return cachedStore(tb, fmt.Sprintf("store-%dMiB", size>>20), func(db *kdb.DB) {
		fillStore(tb, db, size)
	})
}

// cachedStore returns the directory Dir()/name, first filling a new store
// there with fill (opened with BuildOptions, closed after) unless a
// previous run completed it (its "built" marker exists).
func cachedStore(tb testing.TB, name string, fill func(db *kdb.DB)) string {
	tb.Helper()
	dir := filepath.Join(Dir(), name)
	done := filepath.Join(dir, "built")
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	db, err := kdb.Open(dir, BuildOptions())
	if err != nil {
		tb.Fatal(err)
	}
	fill(db)
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(done, []byte("ok\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built %s in %v", dir, time.Since(start).Round(time.Millisecond))
	return dir
}

// fillStore writes keys of 16 bytes with 16 KiB values into index "data"
// until db.data holds at least size bytes.
func fillStore(tb testing.TB, db *kdb.DB, size int64) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	val := make([]byte, 16<<10)
	for i := range val {
		val[i] = byte(rng.Uint32())
	}
	b := kdb.NewBatch()
	var n uint64
	for {
		st := db.Stats()
		if int64(st.PageCount)*4096 >= size {
			break
		}
		b.Reset()
		for range 64 {
			var k [16]byte
			binary.BigEndian.PutUint64(k[:], n)
			binary.BigEndian.PutUint64(k[8:], rng.Uint64())
			binary.LittleEndian.PutUint64(val, n)
			b.Put("data", k[:], val)
			n++
		}
		if err := db.Write(b); err != nil {
			tb.Fatal(err)
		}
	}
}

// Environment of the crash writer child (TestCrashWriterChild).
const (
	crashEnvDir   = "KDB_BENCH_CRASH_DIR"
	crashEnvBytes = "KDB_BENCH_CRASH_BYTES"
)

// CrashWithJournal leaves the store in dir as a process crash between
// checkpoints leaves it, with journalBytes of journal to replay: it runs
// this test binary again as a child (TestCrashWriterChild) that opens the
// store, writes journalBytes of 1 KiB puts (values in the journal, each
// batch synced, no checkpoint), says so once the last batch is
// acknowledged, and is then killed with SIGKILL. So the next Open finds what
// a real crash leaves: no close mark, the tail not checked by a Close, the
// lock file behind, and a page file that knows nothing of the journal
// written. It returns the number of puts.
func CrashWithJournal(tb testing.TB, dir string, journalBytes int64) int {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriterChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvDir+"="+dir, crashEnvBytes+"="+strconv.FormatInt(journalBytes, 10))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	defer stdin.Close() // the child exits when its stdin closes, should the kill fail
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	n, ok := 0, false
	for sc.Scan() {
		if rest, found := strings.CutPrefix(sc.Text(), "acknowledged "); found {
			n, err = strconv.Atoi(rest)
			ok = err == nil
			break
		}
	}
	killErr := cmd.Process.Kill() // SIGKILL
	werr := cmd.Wait()
	if !ok {
		tb.Fatalf("crash writer child did not finish its writes (%v): %s", werr, stderr.String())
	}
	if killErr != nil {
		tb.Fatalf("kill the crash writer child: %v", killErr)
	}
	if st, isExit := werr.(*exec.ExitError); !isExit || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		tb.Fatalf("crash writer child ended with %v, want killed by SIGKILL: %s", werr, stderr.String())
	}
	return n
}

// crashWriter is the body of the crash writer child: it opens dir, writes
// journalBytes of 1 KiB puts, prints "acknowledged <n>" and waits for its
// stdin to close (it is killed first) without closing the store.
func crashWriter(dir string, journalBytes int64) error {
	db, err := kdb.Open(dir, &kdb.Options{
		CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20,
	})
	if err != nil {
		return err
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
			return err
		}
	}
	if _, err := fmt.Fprintf(os.Stdout, "acknowledged %d\n", n); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return errors.New("stdin closed before the kill")
}
