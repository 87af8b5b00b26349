package peers

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// Crash simulation: a child process (this test binary re-executed with
// PEERS_CRASH_CHILD=engine|dir) opens the store in durable mode and writes
// 1 KiB puts at random keys as fast as it can; the parent SIGKILLs it
// mid-write (after it has reported crashAfter durable puts, plus a short
// delay), so the store is left exactly as a process crash leaves it (the
// page cache is not dropped: this is a process crash, not a power loss).
const crashAfter = 20

func TestMain(m *testing.M) {
	if spec := os.Getenv("PEERS_CRASH_CHILD"); spec != "" {
		os.Exit(crashChild(spec))
	}
	code := m.Run()
	RemoveKahaBuild()
	os.Exit(code)
}

func crashChild(spec string) int {
	name, dir, _ := strings.Cut(spec, "|")
	e, err := EngineByName(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	db, err := e.Open(dir, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	val := make([]byte, 1024)
	for n := 1; ; n++ {
		var k [16]byte
		binary.BigEndian.PutUint64(k[:], rng.Uint64())
		binary.BigEndian.PutUint64(k[8:], rng.Uint64())
		if err := db.Put(k[:], val); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if n == crashAfter {
			fmt.Println("ready")
		}
	}
}

// crash leaves the store in dir as a SIGKILL during durable writes leaves
// it. The writer is the engine that owns the store (kdb for kdb-scan).
func crash(tb testing.TB, e Engine, dir string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PEERS_CRASH_CHILD="+e.StoreName()+"|"+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		tb.Fatalf("crash child for %s: %q %v", e.Name, line, err)
	}
	time.Sleep(50 * time.Millisecond) // let it be in the middle of writes
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	cmd.Wait()
}

// Dir returns the directory under which built stores are cached.
func Dir() string {
	if d := os.Getenv("KDB_BENCH_DIR"); d != "" {
		return filepath.Join(d, "peers")
	}
	return filepath.Join(os.TempDir(), "kdb-peers")
}

// buildStore returns a cached store of engine e filled by fill (run once:
// the directory is marked "built" after a clean close). e must own its
// stores (Engine.Store empty).
func buildStore(tb testing.TB, e Engine, name string, fill func(db DB) error) string {
	tb.Helper()
	if e.Store != "" {
		tb.Fatalf("buildStore(%s): the store belongs to %s", e.Name, e.Store)
	}
	dir := filepath.Join(Dir(), name, e.Name)
	done := dir + ".built"
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	db, err := e.Open(dir, true)
	if err != nil {
		tb.Fatal(err)
	}
	if err := fill(db); err != nil {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(done, []byte("ok\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built %s for %s in %v (%d MiB on disk)", name, e.Name, time.Since(start).Round(time.Millisecond), duMiB(dir))
	return dir
}

// warmFiles reads every file under dir once, so that the page cache holds
// them (as far as memory allows).
func warmFiles(dir string) error {
	buf := make([]byte, 1<<20)
	return filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || !fi.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			_, err := f.Read(buf)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
}

func duMiB(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n >> 20
}

// bytesData calls put for the size/16 KiB pairs of a store of about size
// bytes: 16-byte keys (ascending) and 16 KiB random values, the same for
// every engine (the generator is seeded by size alone). k and v are reused
// between calls.
func bytesData(size int64, put func(k, v []byte) error) error {
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	k := make([]byte, 16)
	v := make([]byte, 16<<10)
	for i := range size / (16 << 10) {
		binary.BigEndian.PutUint64(k, uint64(i))
		binary.BigEndian.PutUint64(k[8:], rng.Uint64())
		for o := 0; o < len(v); o += 8 {
			binary.LittleEndian.PutUint64(v[o:], rng.Uint64())
		}
		if err := put(k, v); err != nil {
			return err
		}
	}
	return nil
}

var errEnough = errors.New("enough")

// checkData checks that db holds the first n pairs of bytesData(size).
func checkData(db DB, size int64, n int) error {
	err := bytesData(size, func(k, v []byte) error {
		got, err := db.Get(k)
		if err != nil {
			return fmt.Errorf("key %x: %w", k, err)
		}
		if !bytes.Equal(got, v) {
			return fmt.Errorf("key %x: value differs (%d bytes, want %d)", k, len(got), len(v))
		}
		if n--; n == 0 {
			return errEnough
		}
		return nil
	})
	if err == errEnough {
		err = nil
	}
	return err
}

// fillBytes loads bytesData(size) in transactions of 64 puts.
func fillBytes(e Engine, size int64) func(DB) error {
	return func(db DB) error {
		keys := make([][]byte, 0, 64)
		vals := make([][]byte, 0, 64)
		flush := func() error {
			err := e.Batch(db, keys, vals)
			keys, vals = keys[:0], vals[:0]
			return err
		}
		err := bytesData(size, func(k, v []byte) error {
			keys = append(keys, bytes.Clone(k))
			vals = append(vals, bytes.Clone(v))
			if len(keys) == 64 {
				return flush()
			}
			return nil
		})
		if err == nil && len(keys) > 0 {
			err = flush()
		}
		return err
	}
}

const getKeys = 1_000_000

func getKey(k []byte, i uint64) {
	binary.BigEndian.PutUint64(k, i*0x9E3779B97F4A7C15) // spread, unique
	binary.BigEndian.PutUint64(k[8:], i)
}

// fillGet loads getKeys keys of 16 bytes with 100-byte values.
func fillGet(e Engine) func(DB) error {
	return func(db DB) error {
		const per = 1000
		keys := make([][]byte, per)
		vals := make([][]byte, per)
		for i := range per {
			keys[i] = make([]byte, 16)
			vals[i] = make([]byte, 100)
		}
		for i := uint64(0); i < getKeys; i += per {
			for j := range uint64(per) {
				getKey(keys[j], i+j)
				binary.LittleEndian.PutUint64(vals[j], i+j)
			}
			if err := e.Batch(db, keys, vals); err != nil {
				return err
			}
		}
		return nil
	}
}

func BenchmarkPeers(b *testing.B) {
	type workload struct {
		name string
		run  func(b *testing.B, e Engine)
		// disk, if set, runs instead of the engines, once, as
		// engine=disk: a figure of the disk that no engine can beat.
		disk func(b *testing.B)
	}
	wls := []workload{
		{name: "write-1", run: func(b *testing.B, e Engine) { benchWrite(b, e, 1) }},
		{name: "write-16", run: func(b *testing.B, e Engine) { benchWrite(b, e, 16) }},
		{name: "write-16-bound", disk: benchWriteBound},
		{name: "get", run: benchGet},
		{name: "open-after-crash-1GiB", run: func(b *testing.B, e Engine) { benchOpen(b, e, 1<<30) }},
		{name: "open-after-crash-4GiB", run: func(b *testing.B, e Engine) {
			if os.Getenv("KDB_BENCH_BIG") != "1" {
				b.Skip("set KDB_BENCH_BIG=1 for the 4 GiB stores")
			}
			benchOpen(b, e, 4<<30)
		}},
	}
	// Engines alternate within each workload.
	for _, w := range wls {
		b.Run("workload="+w.name, func(b *testing.B) {
			if w.disk != nil {
				b.Run("engine=disk", w.disk)
				return
			}
			for _, e := range Engines {
				if e.OpenOnly && !strings.HasPrefix(w.name, "open-after-crash-") {
					continue
				}
				b.Run("engine="+e.Name, func(b *testing.B) { w.run(b, e) })
			}
		})
	}
}

// benchWrite: durable 1 KiB puts at random 16-byte keys from writers
// goroutines into a fresh store (one put = one durable transaction). The
// timed region ends with the engine's Settle (kdb's checkpoint, Pebble's
// memtable flush), since bbolt pays its page writes inside every commit;
// checkpoints/op counts the checkpoints (flushes) per put, that one
// included.
func benchWrite(b *testing.B, e Engine, writers int) {
	dir := filepath.Join(Dir(), "tmp", e.Name)
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	db, err := e.Open(dir, false)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	settler, _ := db.(Settler)
	var ck0 uint64
	if settler != nil {
		ck0 = settler.Checkpoints()
	}
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			val := make([]byte, 1024)
			var k [16]byte
			for next.Add(1) <= int64(b.N) {
				binary.BigEndian.PutUint64(k[:], rng.Uint64())
				binary.BigEndian.PutUint64(k[8:], rng.Uint64())
				if err := db.Put(k[:], val); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if settler != nil {
		if err := settler.Settle(); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
	if settler != nil {
		b.ReportMetric(float64(settler.Checkpoints()-ck0)/float64(b.N), "checkpoints/op")
	}
}

// boundRecord is the bytes one fdatasync of 16 writers' puts carries in a
// journal: 16 KiB of values plus 16 × 48 bytes of per-record framing
// (header, key, checksum; about what any engine's log adds to a 1 KiB
// put), 16×1024 + 16×48 = 17152 bytes.
const boundRecord = 16*1024 + 16*48

// benchWriteBound (write-16-bound, engine=disk): the most 16 closed-loop
// writers of durable 1 KiB puts can reach on this disk, whatever the
// engine. Each put returns only after an fdatasync that covers it, so at
// most 16 puts share one fdatasync, and those 16 carry ~16.75 KiB of
// journal bytes; on this disk the cost of a pwrite+fdatasync grows with
// the bytes written, so the bound is 16 × the rate of fdatasynced
// boundRecord appends. The loop appends boundRecord bytes at consecutive
// offsets of a file whose blocks were zero-filled and synced beforehand
// (as a recycled or zero-filled journal segment's are), each followed by
// File.Sync of kdb's vfs.OS (fdatasync on Linux, fsync elsewhere; nothing
// else of kdb runs). Reports ops/s = 16 × appends per second and µs/fsync
// (wall time per append+fdatasync). The file is removed afterwards.
func benchWriteBound(b *testing.B) {
	dir := filepath.Join(Dir(), "tmp", "write-16-bound")
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		b.Fatal(err)
	}
	f, err := vfs.OS.OpenFile(filepath.Join(dir, "segment"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// Room for b.N appends, in whole MiB, zero-filled and synced before
	// the clock starts.
	size := (int64(b.N)*boundRecord + 1<<20 - 1) &^ (1<<20 - 1)
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 17152))
	buf := make([]byte, boundRecord)
	for o := 0; o+8 <= len(buf); o += 8 {
		binary.LittleEndian.PutUint64(buf[o:], rng.Uint64())
	}
	b.SetBytes(boundRecord)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		binary.LittleEndian.PutUint64(buf, uint64(i)) // no two appends alike
		if _, err := f.WriteAt(buf, int64(i)*boundRecord); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(16*float64(b.N)/el.Seconds(), "ops/s")
	b.ReportMetric(el.Seconds()*1e6/float64(b.N), "µs/fsync")
}

// benchGet: random Get of 100-byte values over 1,000,000 keys.
func benchGet(b *testing.B, e Engine) {
	dir := buildStore(b, e, "get-1M", fillGet(e))
	// Page cache warm for every engine alike: another engine's large store
	// may have evicted this one since it was last read, and 10,000 random
	// gets warm only part of it.
	if err := warmFiles(dir); err != nil {
		b.Fatal(err)
	}
	db, err := e.Open(dir, false)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(5, 5))
	k := make([]byte, 16)
	for range 10000 { // warm up
		getKey(k, rng.Uint64N(getKeys))
		if _, err := db.Get(k); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		getKey(k, rng.Uint64N(getKeys))
		v, err := db.Get(k)
		if err != nil || len(v) != 100 {
			b.Fatal(len(v), err)
		}
	}
}

// benchOpen: time to open a store of about size bytes after a crash (a
// child SIGKILLed mid-write, before every iteration; not timed).
func benchOpen(b *testing.B, e Engine, size int64) {
	name := fmt.Sprintf("store-%dMiB", size>>20)
	owner, err := EngineByName(e.StoreName())
	if err != nil {
		b.Fatal(err)
	}
	dir := buildStore(b, owner, name, fillBytes(owner, size))
	b.StopTimer()
	b.ResetTimer()
	var scanned uint64
	// kdb: page file, journal, replay, the background recovery checkpoint
	// (not timed), recovery until Open serves.
	var phases [5]time.Duration
	for i := range b.N {
		crash(b, e, dir)
		b.StartTimer()
		db, err := e.Open(dir, false)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if kd, ok := db.(*kdbDB); ok {
			r := kd.Recovery()
			scanned += r.PagesScanned
			for j, d := range [...]time.Duration{r.PageFileTime, r.JournalTime, r.ReplayTime, 0, r.TotalTime} {
				phases[j] += d
			}
			if testing.Verbose() {
				b.Logf("%s recovery: free list %s (%s), %d pages scanned, %d records replayed; page file %v, journal %v, replay %v, checkpoint %v, total %v",
					e.Name, r.FreeListPath, r.Reason, r.PagesScanned, r.RecordsReplayed, r.PageFileTime, r.JournalTime, r.ReplayTime, r.CheckpointTime, r.TotalTime)
			}
			if err := checkRecovery(e.Name, r); err != nil {
				db.Close()
				b.Fatal(err)
			}
		}
		if i == b.N-1 {
			// The cached store holds what bytesData generates (a
			// stale cache from another generator would not).
			if err := checkData(db, size, 8); err != nil {
				db.Close()
				b.Fatalf("%s: %v (delete %s to rebuild)", dir, err, dir)
			}
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		if kd, ok := db.(*kdbDB); ok {
			// The recovery checkpoint runs in the background after Open
			// returns (not timed); Close waited for it.
			phases[3] += kd.Recovery().CheckpointTime
		}
	}
	// After the loop: ResetTimer would clear these.
	b.ReportMetric(float64(duMiB(dir)), "MiB")
	if owner.Name == "kdb" {
		b.ReportMetric(float64(scanned)/float64(b.N), "pages-scanned/op")
		// Where recovery spent the time (DB.Recovery), per open;
		// checkpoint-ms is the background checkpoint after Open returned.
		for j, unit := range []string{"pagefile-ms/op", "journal-ms/op", "replay-ms/op", "checkpoint-ms/op", "recovery-ms/op"} {
			b.ReportMetric(phases[j].Seconds()*1e3/float64(b.N), unit)
		}
	}
}

// TestEngines is the fast default test: each engine puts, gets, survives
// a crash (SIGKILLed child) and reopens; kdb and kdb-scan take the free-list
// path they stand for (checkRecovery).
func TestEngines(t *testing.T) {
	for _, e := range Engines {
		t.Run(e.Name, func(t *testing.T) {
			owner, err := EngineByName(e.StoreName())
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			db, err := owner.Open(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Put([]byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			crash(t, e, dir)
			db, err = e.Open(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if v, err := db.Get([]byte("k")); err != nil || string(v) != "v" {
				t.Fatalf("after crash: %q %v", v, err)
			}
			if kd, ok := db.(*kdbDB); ok {
				if err := checkRecovery(e.Name, kd.Recovery()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestEngines_SameData: the open-after-crash stores of every engine hold
// the same pairs (a small size, loaded as the benchmarks load theirs).
func TestEngines_SameData(t *testing.T) {
	const size = 100*16<<10 + 5 // 100 pairs: one short batch at the end
	for _, e := range Engines {
		if e.Store != "" {
			continue // opens another engine's store
		}
		t.Run(e.Name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := e.Open(dir, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := fillBytes(e, size)(db); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = e.Open(dir, false); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := checkData(db, size, 100); err != nil {
				t.Fatal(err)
			}
			// checkData can fail: a store of another size holds other pairs.
			if err := checkData(db, size+1<<20, 1); err == nil {
				t.Fatal("checkData found the pairs of another size")
			}
		})
	}
}
