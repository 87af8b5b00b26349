package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func init() {
	register("demo", command{
		summary: "build a store, SIGKILL its writer mid-load, reopen: trusted free list vs forced scan",
		run:     runDemo,
	})
	register("demo-child", command{hidden: true, run: runDemoChild})
}

// demoOptions are the store options of the demo's writer: values of 16 KiB
// inline in the B-tree, so that the page file grows quickly, and checkpoints
// every 32 MiB of journal, so that the kill lands among them.
func demoOptions() *kdb.Options {
	return &kdb.Options{ValueThreshold: -1, CheckpointBytes: 32 << 20}
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "[DIR]", stderr)
	sizeMiB := fs.Int("size-mib", 256, "size of the page file to build before the kill, in MiB (1 to 16384)")
	// The seed's default is drawn when the flag is not given, so that -h
	// shows "random", not a number that changes on every call.
	seed, seedSet := uint64(0), false
	fs.Func("seed", "seed for the kill moment, an unsigned integer (default random)", func(v string) error {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return errors.New("want an unsigned integer")
		}
		seed, seedSet = n, true
		return nil
	})
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	if !seedSet {
		seed = uint64(time.Now().UnixNano())
	}
	dir := "kdb-demo"
	if fs.NArg() > 1 {
		return usageErr(fs, stdout, "want at most one DIR argument, got %d", fs.NArg())
	}
	if fs.NArg() == 1 {
		var err error
		if dir, err = demoDirArg(fs.Arg(0)); err != nil {
			return usageErr(fs, stdout, "%v", err)
		}
	}
	if code := checkDemoSize(fs, stdout, *sizeMiB); code >= 0 {
		return code
	}
	// fail prints an error that stops the demo before its report.
	fail := func(prefix string, err error, code int) int {
		return failed(stdout, stderr, "demo", *asJSON, prefix, err, code)
	}
	scanDir := dir + "-scan"
	// Checked first: nothing (not even the lock below) is made inside
	// another store's directory.
	if err := insideStore(dir, "name a directory outside it"); err != nil {
		return fail("", err, refusalExit(err))
	}
	// Judged before anything is made, so that a refusal leaves nothing
	// behind (not even the lock files below), and judged again under the
	// lock.
	removable := func() int {
		for _, d := range []string{dir, scanDir} {
			if err := demoRemovable(d); err != nil {
				return fail("", err, exitUsage)
			}
		}
		return -1
	}
	if code := removable(); code >= 0 {
		return code
	}
	// The demo's own lock, held to its end: a second demo of the same DIR
	// (or one whose DIR or DIR-scan is this one's) is refused at once,
	// before it removes anything. The store's lock cannot serve: the
	// demo's child holds it, and between the child's death and the reopen
	// nobody does.
	runLocks, err := lockDemoRun(dir, scanDir)
	if err != nil {
		return fail("", err, exitFor(err))
	}
	defer func() {
		for _, lk := range runLocks {
			_ = lk.Close()
		}
	}()
	if code := removable(); code >= 0 {
		return code
	}
	// Each directory is removed under its store's lock, the one kdb.Open
	// takes: a store that a live process holds is refused (ErrLocked, exit
	// 3) before anything in either directory is removed.
	var locks []vfs.Locker
	defer func() {
		for _, lk := range locks {
			_ = lk.Close()
		}
	}()
	for _, d := range []string{dir, scanDir} {
		lk, err := lockDemoDir(d)
		if err != nil {
			return fail("", err, exitIO)
		}
		if lk != nil {
			locks = append(locks, lk)
		}
	}
	for _, d := range []string{dir, scanDir} {
		if err := os.RemoveAll(d); err != nil {
			return fail("", err, exitIO)
		}
	}
	for _, lk := range locks {
		if err := lk.Close(); err != nil {
			return fail("", err, exitIO)
		}
	}
	locks = nil
	say := func(format string, a ...any) {
		if !*asJSON {
			fmt.Fprintf(stdout, format+"\n", a...)
		}
	}

	// DIR is marked as the demo's before its store is built (copyDir takes
	// the mark to DIR-scan): the next demo deletes only marked stores.
	if err := markDemoDir(dir); err != nil {
		return fail("", err, exitIO)
	}
	say("kdb demo: building a %d MiB store in %s with 4 writers, then SIGKILLing the writing process", *sizeMiB, dir)
	kill, err := runAndKill(dir, *sizeMiB, seed, stderr, say)
	if err != nil {
		return fail("", err, exitIO)
	}
	if testHookDemoKilled != nil {
		testHookDemoKilled()
	}
	// Keep a copy of the crashed state, so that the scan path runs on exactly
	// the state the trusted path saw.
	if err := copyDir(dir, scanDir); err != nil {
		return fail("copying the crashed store: ", err, exitIO)
	}
	if testHookDemoCopied != nil {
		testHookDemoCopied(scanDir)
	}

	trusted, missing, err := demoReopen(dir, false, kill.acked)
	if err != nil {
		return fail("reopening "+dir+": ", err, exitIO)
	}
	scanned, missingScan, err := demoReopen(scanDir, true, kill.acked)
	if err != nil {
		return fail("reopening "+scanDir+" with a forced scan: ", err, exitIO)
	}
	if *asJSON {
		out := map[string]any{
			"dir": dir, "seed": seed, "kill_delay": demoKillDelay(seed).String(),
			"killed_after": kill.after.String(), "acknowledged_keys": len(kill.acked),
			"missing_keys": missing + missingScan, "trusted": reportJSON(trusted), "scanned": reportJSON(scanned),
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitIO
		}
	} else {
		say("")
		say("%-22s %-28s %-28s", "", "reopen (db.free)", "reopen (forced scan)")
		row := func(name, a, b string) { say("%-22s %-28s %-28s", name, a, b) }
		row("free-list path", trusted.FreeListPath, scanned.FreeListPath)
		row("reason", orDash(trusted.Reason), orDash(scanned.Reason))
		row("checkpoint", trusted.CheckpointID, scanned.CheckpointID)
		row("redo applied", fmt.Sprintf("%v (%d pages)", trusted.RedoApplied, trusted.RedoPages), fmt.Sprintf("%v (%d pages)", scanned.RedoApplied, scanned.RedoPages))
		row("pages scanned", strconv.FormatUint(trusted.PagesScanned, 10), strconv.FormatUint(scanned.PagesScanned, 10))
		row("free-list time", trusted.FreeListTime.String(), scanned.FreeListTime.String())
		row("records replayed", strconv.FormatInt(trusted.RecordsReplayed, 10), strconv.FormatInt(scanned.RecordsReplayed, 10))
		row("torn bytes cut", strconv.FormatInt(trusted.TornBytesTruncated, 10), strconv.FormatInt(scanned.TornBytesTruncated, 10))
		row("replay time", trusted.ReplayTime.String(), scanned.ReplayTime.String())
		row("total open time", trusted.TotalTime.String(), scanned.TotalTime.String())
		say("")
		if trusted.FreeListTime > 0 && trusted.FreeListPath == "trusted" {
			say("free list: db.free was %.0fx faster than the scan", float64(scanned.FreeListTime)/float64(trusted.FreeListTime))
		}
		say("acknowledged keys verified: %d, missing: %d (trusted) and %d (scan)", len(kill.acked), missing, missingScan)
	}
	if missing+missingScan > 0 {
		fmt.Fprintln(stderr, "kdbtool demo: acknowledged keys are missing")
		return exitProblems
	}
	return exitOK
}

// demoDirArg returns the demo's DIR argument p cleaned (DIR-scan is DIR's
// sibling: "myd3/" is "myd3", whose copy is "myd3-scan", not "myd3/-scan"
// inside the store), or a usage error: the demo deletes and rebuilds DIR,
// so an empty path, and one whose last element is "." or ".." (the current
// directory, a parent: the demo would delete the directory it runs in, and
// RemoveAll refuses "."), are refused; it wants a directory of its own.
func demoDirArg(p string) (string, error) {
	const hint = "name a new directory of its own, such as ./kdb-demo (the demo deletes and rebuilds DIR and DIR-scan)"
	if p == "" {
		return "", fmt.Errorf("DIR is empty: %s", hint)
	}
	if last := filepath.Base(p); last == "." || last == ".." {
		return "", fmt.Errorf("DIR %s ends in %q, which the demo refuses: %s", p, last, hint)
	}
	d := vfs.CleanPath(p)
	if d == string(filepath.Separator) {
		return "", fmt.Errorf("DIR %s is the root directory: %s", p, hint)
	}
	// DIR-scan too: the demo deletes it as well.
	if cwdOrParent(d) || cwdOrParent(d+"-scan") {
		return "", fmt.Errorf("DIR %s, or %s-scan beside it, is the current directory or one of its parents: %s", p, p, hint)
	}
	return d, nil
}

// maxDemoMiB bounds demo's --size-mib: the child writes until the page
// file holds that much, so a larger value is a demo that runs for hours.
const maxDemoMiB = 16 << 10

// checkDemoSize returns exitUsage (having said why: usageErr) for a
// --size-mib out of [1, maxDemoMiB], else -1.
func checkDemoSize(fs *flag.FlagSet, stdout io.Writer, sizeMiB int) int {
	if sizeMiB < 1 || sizeMiB > maxDemoMiB {
		return usageErr(fs, stdout, "--size-mib %d: want 1 to %d (16 GiB)", sizeMiB, maxDemoMiB)
	}
	return -1
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func reportJSON(r kdb.RecoveryReport) map[string]any {
	return map[string]any{
		"free_list_path": r.FreeListPath, "reason": r.Reason, "checkpoint_id": r.CheckpointID,
		"redo_applied": r.RedoApplied, "pages_scanned": r.PagesScanned, "free_pages": r.FreePages,
		"records_replayed": r.RecordsReplayed, "bytes_truncated": r.TornBytesTruncated,
		"free_list_ms": ms(r.FreeListTime), "replay_ms": ms(r.ReplayTime), "duration_ms": ms(r.TotalTime),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type killInfo struct {
	after time.Duration
	acked []uint64
}

// runAndKill starts the writing child and SIGKILLs it at a random moment once
// it has built the store, collecting the keys it acknowledged.
func runAndKill(dir string, sizeMiB int, seed uint64, stderr io.Writer, say func(string, ...any)) (killInfo, error) {
	exe, err := os.Executable()
	if err != nil {
		return killInfo{}, err
	}
	cmd := exec.Command(exe, "demo-child", "-size-mib", strconv.Itoa(sizeMiB), dir)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return killInfo{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return killInfo{}, err
	}
	var (
		info    killInfo
		mu      sync.Mutex
		built   = make(chan struct{})
		scanned = make(chan struct{})
	)
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			if line == "built" {
				once.Do(func() { close(built) })
				continue
			}
			if k, err := strconv.ParseUint(line, 10, 64); err == nil {
				mu.Lock()
				info.acked = append(info.acked, k)
				mu.Unlock()
			}
		}
	}()
	select {
	case <-built:
	case <-scanned:
		_ = cmd.Wait()
		return info, fmt.Errorf("the writer exited before building the store")
	}
	say("  built in %v; writing on for %v (seed %d)", time.Since(start).Round(time.Millisecond), demoKillDelay(seed), seed)
	time.Sleep(demoKillDelay(seed))
	info.after = time.Since(start).Round(time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return info, err
	}
	_ = cmd.Wait()
	<-scanned
	say("  writer SIGKILLed after %v, with %d keys acknowledged", info.after, len(info.acked))
	return info, nil
}

// demoKillDelay is how long the demo lets its writer go on once the store
// is built before it kills it: 200 ms to 1.7 s, drawn from seed, so that
// one seed gives one kill moment.
func demoKillDelay(seed uint64) time.Duration {
	rng := rand.New(rand.NewPCG(seed, 1))
	return time.Duration(200+rng.IntN(1500)) * time.Millisecond
}

// testHookDemoKilled, if set (by tests only: TestMain sets it in a child),
// is called once the demo's writer is killed, before the crashed store is
// copied: nobody holds the store's lock then.
var testHookDemoKilled func()

// testHookDemoCopied, if set (by tests only: TestMain sets it in a child),
// is called once the crashed store has been copied to scanDir, before
// either copy is reopened.
var testHookDemoCopied func(scanDir string)

// demoReopen opens the crashed store (recovery runs), checks that every
// acknowledged key is there, and closes it.
func demoReopen(dir string, forceScan bool, acked []uint64) (kdb.RecoveryReport, int, error) {
	db, err := kdb.Open(dir, &kdb.Options{ForceFreeListScan: forceScan})
	if err != nil {
		return kdb.RecoveryReport{}, 0, err
	}
	rep := db.Recovery()
	missing := 0
	for _, k := range acked {
		if _, err := db.Get("demo", demoKey(k)); err != nil {
			missing++
		}
	}
	return rep, missing, db.Close()
}

// The demo's writer: demoWriters goroutines write values of demoValueSize
// bytes (demoRecord says what they hold).
const (
	demoWriters   = 4
	demoValueSize = 16 << 10
)

func demoKey(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

// runDemoChild builds the store, prints "built", then goes on writing; it
// prints each key once its write is acknowledged, until it is killed.
func runDemoChild(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo-child", "DIR", stderr)
	sizeMiB := fs.Int("size-mib", 256, "")
	if code := parseFlags(fs, args, stdout); code >= 0 || fs.NArg() != 1 {
		return exitUsage
	}
	if pathArg(fs, "DIR", fs.Arg(0)) != nil {
		return exitUsage
	}
	if code := checkDemoSize(fs, stdout, *sizeMiB); code >= 0 {
		return code
	}
	db, err := kdb.Open(fs.Arg(0), demoOptions())
	if err != nil {
		fmt.Fprintf(stderr, "demo-child: %s\n", errLine(err))
		return exitIO
	}
	w := bufio.NewWriter(stdout)
	var (
		mu   sync.Mutex
		next atomic.Uint64
		wg   sync.WaitGroup
	)
	target := uint64(*sizeMiB) << 20
	var builtOnce sync.Once
	for g := range demoWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			val := make([]byte, demoValueSize)
			b := kdb.NewBatch()
			for {
				b.Reset()
				keys := make([]uint64, 8)
				for i := range keys {
					keys[i] = next.Add(1)
					binary.LittleEndian.PutUint64(val, keys[i]^uint64(g))
					b.Put("demo", demoKey(keys[i]), val)
				}
				if err := db.Write(b); err != nil {
					fmt.Fprintf(stderr, "demo-child: %s\n", errLine(err))
					os.Exit(exitIO)
				}
				mu.Lock()
				for _, k := range keys {
					fmt.Fprintln(w, k)
				}
				if st := db.Stats(); st.PageCount*4096 >= target {
					builtOnce.Do(func() { fmt.Fprintln(w, "built") })
				}
				_ = w.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return exitOK
}

// copyDir copies the regular files of src into a new directory dst.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// demoMark is the file the demo puts in the directories of its stores: it
// deletes a directory that holds a store only if it holds this file too.
const demoMark = "KDBTOOL-DEMO"

// markDemoDir creates dir (which the demo just removed) with its mark.
func markDemoDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, demoMark), []byte("This store was built by kdbtool demo, which deletes and rebuilds this directory.\n"), 0o600)
}

// demoRemovable refuses a directory the demo would delete (it starts from
// an empty DIR and DIR-scan) unless it is absent, empty, or holds nothing
// but an earlier demo's store (a store's files and the demo's mark):
// "kdbtool demo ~" must not delete a home directory, nor "kdbtool demo
// /var/lib/broker/store" a store the demo did not build.
func demoRemovable(dir string) error {
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory: name a new directory (the demo deletes and rebuilds it)", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if err := strayFile(dir, ents, demoMark, "name a new directory (the demo deletes and rebuilds it)"); err != nil {
		return err
	}
	marked := false
	for _, e := range ents {
		if e.Name() == demoMark && e.Type().IsRegular() {
			marked = true
		}
	}
	if len(ents) > 0 && !marked && !olderDemoStore(dir) {
		return fmt.Errorf("%s holds a store that kdbtool demo did not build (it has no %s file): name a new directory (the demo deletes and rebuilds it), or delete that store yourself if it is an earlier demo's", dir, demoMark)
	}
	return nil
}

// olderDemoStore reports whether dir holds a store that a demo from before
// the mark built: one that opens read-only and holds the demo's index and
// nothing else (no other index, no namespace), every key and value of it
// of the form the demo's writer gives them (demoRecord). An application's
// store whose only index happens to be named "demo" is not the demo's, nor
// is anything else, a store that does not open included.
func olderDemoStore(dir string) bool {
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		return false
	}
	defer db.Close()
	idx, ns, err := storeNames(db)
	if err != nil || len(idx) != 1 || idx[0] != "demo" || len(ns) != 0 {
		return false
	}
	err = db.View(func(s *kdb.Snapshot) error {
		it := s.Iter("demo")
		for k, v := range it.All() {
			if !demoRecord(k, v) {
				return errNotDemo
			}
		}
		return it.Err()
	})
	return err == nil
}

var errNotDemo = errors.New("not a record the demo wrote")

// demoRecord reports whether key and val are of the form the demo's
// writer (runDemoChild) gives them: an 8-byte key (demoKey: a big-endian
// number) and a 16 KiB value that begins with that number, little-endian,
// XOR the number of the writer (0 to 3) and is zero after it.
func demoRecord(key, val []byte) bool {
	if len(key) != 8 || len(val) != demoValueSize {
		return false
	}
	if binary.LittleEndian.Uint64(val)^binary.BigEndian.Uint64(key) >= demoWriters {
		return false
	}
	for _, b := range val[8:] {
		if b != 0 {
			return false
		}
	}
	return true
}

// storeNames returns the user indexes and the namespaces the store holds.
func storeNames(db *kdb.DB) (indexes, namespaces []string, err error) {
	err = db.View(func(s *kdb.Snapshot) error {
		var err error
		if indexes, err = s.Indexes(); err != nil {
			return err
		}
		namespaces, err = s.Namespaces()
		return err
	})
	return indexes, namespaces, err
}

// lockDemoDir takes the store lock of dir, a directory demoRemovable
// accepted, before the demo removes it: nil if dir does not exist (nothing
// to remove), ErrLocked naming dir if a live process holds the store. The
// lock file is created if missing; it goes with the directory.
func lockDemoDir(dir string) (vfs.Locker, error) {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	lk, err := vfs.LockStore(vfs.OS, dir)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %s: the store is open in another process (or handle); the demo deletes and rebuilds it: close it first, or name another directory: %w", kdb.ErrLocked, dir, err)
	}
	return lk, err
}

// demoLockSuffix names the lock file a demo holds for each directory it
// deletes and rebuilds, DIR and DIR-scan: "." + base(d) + demoLockSuffix,
// beside d. The file stays (empty) once the demo is over.
const demoLockSuffix = ".demo.lock"

// lockDemoRun takes the demo's own lock of each of dirs (DIR and DIR-scan),
// exclusive, for the demo's whole run: a lock file beside each, created
// (with the parent directory) if missing. A demo running on one of them
// holds its lock: ErrLocked (exit 3) naming it, before anything is
// removed. On error no lock is held.
func lockDemoRun(dirs ...string) ([]vfs.Locker, error) {
	var locks []vfs.Locker
	release := func() {
		for _, lk := range locks {
			_ = lk.Close()
		}
	}
	for _, d := range dirs {
		parent := filepath.Dir(d)
		if err := os.MkdirAll(parent, 0o750); err != nil {
			release()
			return nil, err
		}
		name := filepath.Join(parent, "."+filepath.Base(d)+demoLockSuffix)
		lk, err := vfs.OS.Lock(name)
		if errors.Is(err, vfs.ErrLocked) {
			release()
			return nil, fmt.Errorf("%w: %s: another kdbtool demo is running on it (it holds %s); wait for it to finish, or name another directory: %w",
				kdb.ErrLocked, d, name, err)
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("locking %s for the demo: %w", d, err)
		}
		locks = append(locks, lk)
	}
	return locks, nil
}
