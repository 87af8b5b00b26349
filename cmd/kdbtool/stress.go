package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func init() {
	register("stress", command{
		summary: "write values with N writers, printing each key once it is durable (crash-test a disk)",
		run:     runStress,
	})
	register("verify", command{
		summary: "check that every key listed by stress (--acked FILE) is present and intact",
		run:     runVerify,
	})
}

// ackedBeforeOpen returns what verify reads of its list of keys f, and the
// split function that cuts it into lines: a regular file is read up to its
// present size, and a last line cut at that size (no newline) is skipped if
// the file has grown since (being written then: not acknowledged yet); any
// other file is read to its end now.
func ackedBeforeOpen(f *os.File) (in io.Reader, split bufio.SplitFunc, err error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		b, err := io.ReadAll(f)
		if err != nil {
			return nil, nil, err
		}
		return bytes.NewReader(b), bufio.ScanLines, nil
	}
	size := st.Size()
	grown := func() bool {
		now, err := f.Stat()
		return err == nil && now.Size() > size
	}
	split = func(data []byte, atEOF bool) (int, []byte, error) {
		if atEOF && len(data) > 0 && bytes.IndexByte(data, '\n') < 0 && grown() {
			return len(data), nil, nil // being written when verify began: not acknowledged then
		}
		return bufio.ScanLines(data, atEOF)
	}
	return io.LimitReader(f, size), split, nil
}

// stressValue is the value stress writes under key: size bytes derived
// from the key, so that verify can check the content too.
func stressValue(key string, size int) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	r := mrand.New(mrand.NewPCG(h.Sum64(), 0x6b6462))
	v := make([]byte, size)
	for i := 0; i+8 <= size; i += 8 {
		x := r.Uint64()
		for j := 0; j < 8; j++ {
			v[i+j] = byte(x >> (8 * j))
		}
	}
	for i := size &^ 7; i < size; i++ {
		v[i] = byte(r.Uint32())
	}
	return v
}

// Bounds of stress's flags. The segment sizes are those kdb.Options
// accepts (its validate); the journal's own format allows up to 2 GiB
// (docs/FORMAT.md §4.1), the engine's options up to 1 GiB.
const (
	maxStressWriters = 1024
	// maxStressInFlight bounds --writers × --size: each writer holds its
	// value, and the engine a copy, while its write is in flight, so 1024
	// writers of 8 MiB values would hold ~16 GiB.
	maxStressInFlight = 1 << 30
	minSegmentSize    = 64 << 10
	maxSegmentSize    = 1 << 30
)

type stressOut struct {
	Dir         string  `json:"dir"`
	Index       string  `json:"index"`
	Run         string  `json:"run"`
	Writers     int     `json:"writers"`
	Size        int     `json:"size"`
	Acked       int64   `json:"acked"`
	Seconds     float64 `json:"seconds"`
	PerSec      float64 `json:"writes_per_sec"`
	MiBPerS     float64 `json:"mib_per_sec"`
	Error       string  `json:"error,omitempty"`
	Interrupted bool    `json:"interrupted"`
}

// runStress writes until --count writes are acknowledged, --duration has
// passed, or SIGINT/SIGTERM. Each acknowledged key is printed on stdout
// (one per line, flushed at once); the summary goes to stderr (as JSON
// with --json), so that stdout stays the list of acknowledged keys.
func runStress(args []string, stdout, stderr io.Writer) int {
	// SIGINT/SIGTERM are handled from the start: one that comes during the
	// checks and the open below stops stress before its first write, not
	// by the signal's default action.
	sigCtx, stop := onInterrupt()
	defer stop()
	fs := newFlags("stress", "DIR", stderr)
	asJSON := fs.Bool("json", false, "print the summary on stderr as one JSON document")
	size := fs.Int("size", 1024, "value size in bytes")
	writers := fs.Int("writers", 4, "concurrent writers (1 to 1024)")
	count := fs.Int64("count", 0, "total writes to acknowledge (0: until --duration or a signal; default 1000 if neither is set)")
	duration := fs.Duration("duration", 0, "how long to write (0: until --count or a signal)")
	index := fs.String("index", "stress", "the index to write to")
	segSize := fs.Int64("segment-size", 0, "journal segment size for a new store, 64 KiB to 1 GiB (0: the default, 32 MiB)")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	if testHookFlagsParsed != nil {
		testHookFlagsParsed(sigCtx)
	}
	// stdout is the list of acknowledged keys: a usage error prints none
	// (and with --json no document: stderr holds the usage).
	dir, err := oneArg(fs)
	if err != nil {
		return exitUsage
	}
	switch {
	case *size < 0 || *size > kdb.MaxValueSize:
		return usageErr(fs, io.Discard, "--size %d: want 0 to %d bytes (kdb.MaxValueSize)", *size, kdb.MaxValueSize)
	case *writers < 1 || *writers > maxStressWriters:
		return usageErr(fs, io.Discard, "--writers %d: want 1 to %d", *writers, maxStressWriters)
	case int64(*writers)*int64(*size) > maxStressInFlight:
		return usageErr(fs, io.Discard, "--writers %d × --size %d: %d MiB of values in flight at once; want at most %d MiB (fewer writers or smaller values)",
			*writers, *size, int64(*writers)*int64(*size)>>20, maxStressInFlight>>20)
	case *count < 0:
		return usageErr(fs, io.Discard, "--count %d: want 0 (until --duration or a signal) or more", *count)
	case *duration < 0:
		return usageErr(fs, io.Discard, "--duration %v: want 0 (until --count or a signal) or more", *duration)
	case *segSize != 0 && (*segSize < minSegmentSize || *segSize > maxSegmentSize):
		return usageErr(fs, io.Discard, "--segment-size %d: want 0 (the default, 32 MiB) or %d (64 KiB) to %d (1 GiB)",
			*segSize, minSegmentSize, maxSegmentSize)
	case *index == "":
		return usageErr(fs, io.Discard, "--index is empty: name the index to write to")
	}
	// No --count and no --duration: 1000 writes. An explicit --count 0 is
	// "until --duration or a signal", as its help says.
	countSet := false
	fs.Visit(func(f *flag.Flag) { countSet = countSet || f.Name == "count" })
	if !countSet && *duration == 0 {
		*count = 1000
	}
	var rb [4]byte
	rand.Read(rb[:])
	runID := hex.EncodeToString(rb[:])

	// fail prints an error that stops stress before it writes: with
	// --json as one JSON document on stderr, where the summary goes
	// (errorDoc, as failed prints on stdout for the other subcommands).
	fail := func(err error, code int) int {
		if *asJSON {
			writeJSON(stderr, errorDoc("", err))
		} else {
			fmt.Fprintf(stderr, "kdbtool stress: %s\n", errLine(err))
		}
		return code
	}
	if err := unfinishedImport(dir); err != nil {
		return fail(err, exitFor(err))
	}
	if err := stressDir(dir); err != nil {
		return fail(err, refusalExit(err))
	}
	if st, err := os.Stat(filepath.Join(dir, "db.data")); err == nil {
		if err := dataFileKind(dir, st); err != nil {
			return fail(err, exitFor(err))
		}
		// Whose store it is, decided from a read-only open: a writable
		// one recovers (replays the journal, checkpoints at close), which
		// rewrites the files of a store stress then refuses. If the
		// read-only open fails, the writable one below says why.
		if ro, err := kdb.Open(dir, &kdb.Options{ReadOnly: true}); err == nil {
			err = stressTarget(ro, dir, *index)
			ro.Close()
			if errors.Is(err, kdb.ErrInvalid) {
				// A store another process holds is said to be locked
				// first (exit 3), as the writable open says it.
				if lk, lerr := vfs.LockStore(vfs.OS, dir); errors.Is(lerr, vfs.ErrLocked) {
					return fail(fmt.Errorf("%w: %w", kdb.ErrLocked, lerr), exitIO)
				} else if lerr == nil {
					lk.Close()
				}
				return fail(err, exitUsage)
			}
		}
	}
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: *segSize})
	if err != nil {
		if errors.Is(err, kdb.ErrInvalid) {
			return fail(err, exitUsage) // an option the checks above let through
		}
		return fail(err, exitFor(err))
	}
	if err := stressTarget(db, dir, *index); err != nil {
		db.Close()
		if errors.Is(err, kdb.ErrInvalid) {
			return fail(err, exitUsage)
		}
		return fail(err, exitFor(err))
	}
	ctx := sigCtx
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sigCtx, *duration)
		defer cancel()
	}

	var (
		outMu    sync.Mutex
		bw       = bufio.NewWriter(stdout)
		issued   atomic.Int64
		acked    atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	p := newProgress(stderr, "acknowledged")
	start := time.Now()
	for w := 0; w < *writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				if *count > 0 && issued.Add(1) > *count {
					return
				}
				key := fmt.Sprintf("%s-w%03d-%010d", runID, w, n)
				if err := db.Put(*index, []byte(key), stressValue(key, *size)); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				outMu.Lock()
				bw.WriteString(key)
				bw.WriteByte('\n')
				err := bw.Flush()
				outMu.Unlock()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				acked.Add(1)
				p.add(1)
			}
		}()
	}
	wg.Wait()
	p.done()
	secs := time.Since(start).Seconds()
	// Interrupted: a signal stopped the writes, not --duration (the
	// deadline) or --count (all acknowledged).
	interrupted := ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) &&
		(*count == 0 || acked.Load() < *count)
	if err := db.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	so := stressOut{Dir: dir, Index: *index, Run: runID, Writers: *writers, Size: *size, Acked: acked.Load(),
		Seconds: secs, Error: errString(firstErr), Interrupted: interrupted}
	if secs > 0 {
		so.PerSec = float64(so.Acked) / secs
		so.MiBPerS = float64(so.Acked) * float64(*size) / secs / (1 << 20)
	}
	if *asJSON {
		writeJSON(stderr, so)
	} else {
		fmt.Fprintf(stderr, "stress: %d writes of %d bytes acknowledged by %d writers in %.2fs (%.0f/s, %.1f MiB/s), run %s\n",
			so.Acked, so.Size, so.Writers, secs, so.PerSec, so.MiBPerS, runID)
		if firstErr != nil {
			fmt.Fprintf(stderr, "stress: %s\n", errLine(firstErr))
		}
	}
	if firstErr != nil {
		return exitFor(firstErr)
	}
	return exitOK
}

type verifyOut struct {
	Dir        string   `json:"dir"`
	Index      string   `json:"index"`
	Checked    int      `json:"checked"`
	Missing    []string `json:"missing"`
	Mismatched []string `json:"mismatched"`
	Damaged    []string `json:"damaged"` // the value cannot be read: damaged bytes (ErrCorrupt)
	OK         bool     `json:"ok"`
}

func runVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", "--acked FILE DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	ackedPath := fs.String("acked", "", "the keys stress printed, one per line (- for stdin)")
	index := fs.String("index", "stress", "the index stress wrote to")
	readOnly := fs.Bool("read-only", false, "open read-only (no lock, nothing written; the journal after the last checkpoint is replayed in memory)")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	dir, err := oneArg(fs)
	if err != nil {
		return argsFailed(fs, stdout, err)
	}
	if *ackedPath == "" {
		return usageErr(fs, stdout, "--acked FILE is required")
	}
	if *index == "" {
		return usageErr(fs, stdout, "--index is empty: name the index stress wrote to")
	}
	// ctrl-C (or SIGTERM): --read-only writes nothing and stops at once;
	// otherwise an open (recovery) goes on to its end, the store is closed
	// and verify stops, exit 130, reporting nothing of the keys.
	ctx, stop := onInterrupt()
	defer stop()
	if *readOnly {
		defer stopReadOnly(ctx, "verify", "--read-only: nothing was changed", stderr)()
	}
	if testHookFlagsParsed != nil {
		testHookFlagsParsed(ctx)
	}
	f := os.Stdin
	if *ackedPath != "-" {
		if f, err = os.Open(*ackedPath); err != nil {
			return failed(stdout, stderr, "verify", *asJSON, "", err, exitIO)
		}
		defer f.Close()
	}
	// The keys to check are those acknowledged before the store is opened:
	// with --read-only, verify runs beside a live writer (it takes no lock),
	// and its open does not see a write acknowledged after it. A regular
	// file is read up to the size it has now (a last line still being
	// written then is skipped); a pipe (stress | verify --acked -, a FIFO)
	// is read to its end first.
	in, split, err := ackedBeforeOpen(f)
	if err != nil {
		return failed(stdout, stderr, "verify", *asJSON, "reading "+*ackedPath+": ", err, exitIO)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), kdb.MaxKeySize*4)
	sc.Split(split)
	// nextKey returns the next key of the list ("" at its end).
	nextKey := func() string {
		for sc.Scan() {
			if key := strings.TrimSpace(sc.Text()); key != "" {
				return key
			}
		}
		return ""
	}
	// An acked file that holds no key (empty, /dev/null, the wrong file, a
	// stress killed before its first write was acknowledged) would verify
	// nothing and pass: it is a usage error, found before the store is
	// opened (and recovered).
	first := nextKey()
	if err := sc.Err(); err != nil {
		return failed(stdout, stderr, "verify", *asJSON, "reading "+*ackedPath+": ", err, exitIO)
	}
	if first == "" {
		return failed(stdout, stderr, "verify", *asJSON, "", fmt.Errorf(
			"--acked %s holds no keys: nothing to verify (name the file stress printed its acknowledged keys to; an empty one means no write was acknowledged)",
			*ackedPath), exitUsage)
	}
	if err := storeExists(dir); err != nil {
		// A store that lost db.data is ErrCorrupt: 1, as for check and recover.
		return failed(stdout, stderr, "verify", *asJSON, "", err, exitFor(err))
	}
	if ctx.Err() != nil {
		err := fmt.Errorf("%w before the store was opened: nothing was changed", errInterrupted)
		return failed(stdout, stderr, "verify", *asJSON, "", err, exitInterrupted)
	}
	// By default verify opens the store as the application would after a
	// crash: recovery runs (and is reported on stderr).
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: *readOnly})
	if err != nil {
		return failed(stdout, stderr, "verify", *asJSON, "", err, exitFor(err))
	}
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	if !*readOnly {
		r := db.Recovery()
		fmt.Fprintf(stderr, "verify: recovery: free list %s, %d records replayed, %d torn bytes truncated\n",
			r.FreeListPath, r.RecordsReplayed, r.TornBytesTruncated)
	}
	out := &verifyOut{Dir: dir, Index: *index, Missing: []string{}, Mismatched: []string{}, Damaged: []string{}}
	p := newProgress(stderr, "verified")
	indexSeen := false // the index is known to be in the store
	for key := first; key != ""; key = nextKey() {
		if ctx.Err() != nil {
			err := fmt.Errorf("%w after %d keys, before the verdict: the store was opened (recovery ran) and is closed; nothing else was changed", errInterrupted, out.Checked)
			if cerr := db.Close(); cerr != nil {
				err = fmt.Errorf("%w (close: %w)", err, cerr)
			}
			closed = true
			return failed(stdout, stderr, "verify", *asJSON, "", err, exitInterrupted)
		}
		out.Checked++
		p.add(1)
		v, err := db.Get(*index, []byte(key))
		switch {
		case err == nil:
			if string(v) != string(stressValue(key, len(v))) {
				out.Mismatched = append(out.Mismatched, key)
			}
		case errIsNotFound(err):
			if !indexSeen {
				// The first key not found: if the index itself is not in
				// the store (a typo in --index, or a stress run with
				// another --index), say so, rather than list every key
				// as lost.
				if err := indexInStore(db, *index); err != nil {
					code := exitFor(err)
					if errIsNotFound(err) {
						code = exitProblems // as dump's missing index
					}
					return failed(stdout, stderr, "verify", *asJSON, "", err, code)
				}
				indexSeen = true
			}
			out.Missing = append(out.Missing, key)
		case isCorrupt(err):
			// Damaged bytes: this key is lost, the others may not be;
			// count it and go on, so the totals say how much.
			out.Damaged = append(out.Damaged, key)
			fmt.Fprintf(stderr, "verify: %s: %s\n", key, errLine(err))
		default:
			return failed(stdout, stderr, "verify", *asJSON, key+": ", err, exitFor(err))
		}
	}
	p.done()
	if err := sc.Err(); err != nil {
		return failed(stdout, stderr, "verify", *asJSON, "reading "+*ackedPath+": ", err, exitIO)
	}
	// A writable open ends with the checkpoint recovery asked for: if it
	// fails (a full disk, a directory it may not write), the store is not
	// as verified; say so, as recover does.
	closed = true
	if testHookBeforeClose != nil && !*readOnly {
		testHookBeforeClose(ctx, dir)
	}
	if err := db.Close(); err != nil {
		return failed(stdout, stderr, "verify", *asJSON, "close: ", err, exitIO)
	}
	if ctx.Err() != nil {
		err := fmt.Errorf("%w after all %d keys were checked, before the verdict: the store was opened (recovery ran) and is closed; nothing else was changed", errInterrupted, out.Checked)
		return failed(stdout, stderr, "verify", *asJSON, "", err, exitInterrupted)
	}
	out.OK = len(out.Missing) == 0 && len(out.Mismatched) == 0 && len(out.Damaged) == 0
	if *asJSON {
		writeJSON(stdout, out)
	} else {
		for _, k := range out.Missing {
			fmt.Fprintf(stdout, "missing: %s\n", k)
		}
		for _, k := range out.Mismatched {
			fmt.Fprintf(stdout, "wrong value: %s\n", k)
		}
		for _, k := range out.Damaged {
			fmt.Fprintf(stdout, "damaged: %s\n", k)
		}
		fmt.Fprintf(stdout, "%d keys checked, %d missing, %d with a wrong value", out.Checked, len(out.Missing), len(out.Mismatched))
		if len(out.Damaged) > 0 {
			fmt.Fprintf(stdout, ", %d whose value is damaged", len(out.Damaged))
		}
		fmt.Fprintln(stdout)
	}
	if !out.OK {
		return exitProblems
	}
	return exitOK
}

// stressNewStore is what stress's refusals of a directory advise.
const stressNewStore = "stress writes test values only into a new store (in a new or empty directory), one holding only its --index, or a demo's: name a new directory"

// stressDir returns an error (a dirRefusal: exit 2) if stress may not
// make or open a store in dir, with the checks demo and import make of
// the directory of a new store: a dir inside another store's directory
// (insideStore), and, when dir holds no store yet (no db.data: stress
// would create one), a dir that holds anything but a store's files and
// the demo's mark (strayFile), such as another program's files. A store
// that exists (stress's own, a demo's, an application's) is judged by
// what it holds (stressTarget).
func stressDir(dir string) error {
	if err := insideStore(dir, "name a directory outside it"); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(dir, "db.data")); err == nil {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // absent: a new store; anything else, the open says why
	}
	return strayFile(dir, ents, demoMark, stressNewStore)
}

// stressTarget returns nil if stress may write into the store at dir: a
// new one, one that holds only index (an earlier stress's), or one the demo
// built (its mark). Any other data (another index, a namespace: a broker's
// or an integration's) is an application's store, which test values would
// pollute: an error wrapping kdb.ErrInvalid that names what it holds.
func stressTarget(db *kdb.DB, dir, index string) error {
	if st, err := os.Stat(filepath.Join(dir, demoMark)); err == nil && st.Mode().IsRegular() {
		return nil
	}
	names, nss, err := storeNames(db)
	if err != nil {
		return err
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == index })
	if len(names) == 0 && len(nss) == 0 {
		return nil
	}
	var held []string
	if len(names) > 0 {
		held = append(held, fmt.Sprintf("indexes %q", names))
	}
	if len(nss) > 0 {
		held = append(held, fmt.Sprintf("namespaces %q", nss))
	}
	return fmt.Errorf("%w: %s holds data stress did not write (%s): an application's store? stress writes test values only into a new store, one holding only its --index (%q), or a demo's; name a new directory",
		kdb.ErrInvalid, dir, strings.Join(held, " and "), index)
}

// indexInStore returns nil if the store holds the index name, else an
// error (ErrNotFound) that names the indexes it does hold.
func indexInStore(db *kdb.DB, name string) error {
	return db.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		if slices.Contains(names, name) {
			return nil
		}
		held := "no index"
		if len(names) > 0 {
			held = fmt.Sprintf("%q", names)
		}
		return fmt.Errorf("index %q: %w: the store holds %s; name the index stress wrote to with --index", name, kdb.ErrNotFound, held)
	})
}
