package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kdb-project/kdb/internal/vfs"
	"github.com/kdb-project/kdb/pagefile"
)

func init() {
	register("demo", command{
		summary: "build a store, SIGKILL its writer mid-load, reopen: trusted free list vs forced scan",
		run:     runDemo,
	})
	register("demo-child", command{hidden: true, run: runDemoChild})
}

// demoPageType marks the demo's pages; the page file treats types >= 16 as opaque.
const demoPageType pagefile.PageType = 200

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "[DIR]", stderr)
	sizeMiB := fs.Int("size-mib", 256, "size of the page file to build, in MiB")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed for the kill moment and the workload")
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	dir := "kdb-demo"
	if fs.NArg() > 1 {
		fs.Usage()
		return exitUsage
	}
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	scanDir := dir + "-scan"
	for _, d := range []string{dir, scanDir} {
		if err := os.RemoveAll(d); err != nil {
			fmt.Fprintf(stderr, "kdbtool demo: %v\n", err)
			return exitIO
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		fmt.Fprintf(stderr, "kdbtool demo: %v\n", err)
		return exitIO
	}
	say := func(format string, a ...any) {
		if !*asJSON {
			fmt.Fprintf(stdout, format+"\n", a...)
		}
	}

	say("kdb demo: building a %d MiB page file in %s, then SIGKILLing its writer mid-checkpoint-churn", *sizeMiB, dir)
	kill, err := runAndKill(dir, *sizeMiB, *seed, stderr, say)
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool demo: %v\n", err)
		return exitIO
	}
	// Keep a copy of the crashed state, so that the scan path runs on exactly
	// the state the trusted path saw.
	if err := copyDir(dir, scanDir); err != nil {
		fmt.Fprintf(stderr, "kdbtool demo: copying the crashed store: %v\n", err)
		return exitIO
	}

	trusted, tFree, err := demoOpen(dir, false)
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool demo: reopening %s: %v\n", dir, err)
		return exitIO
	}
	scanned, sFree, err := demoOpen(scanDir, true)
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool demo: reopening %s with a forced scan: %v\n", scanDir, err)
		return exitIO
	}
	same := equalRanges(tFree, sFree)
	if *asJSON {
		out := map[string]any{
			"dir": dir, "killed_after_checkpoints": kill.checkpoints, "killed_after": kill.after.String(),
			"trusted": reportJSON(trusted), "scanned": reportJSON(scanned), "free_lists_equal": same,
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitIO
		}
	} else {
		say("")
		say("%-22s %-26s %-26s", "", "reopen (db.free)", "reopen (forced scan)")
		row := func(name, a, b string) { say("%-22s %-26s %-26s", name, a, b) }
		row("free-list path", trusted.FreeListPath, scanned.FreeListPath)
		row("reason", orDash(trusted.Reason), orDash(scanned.Reason))
		row("checkpoint", trusted.MetaID.String(), scanned.MetaID.String())
		row("redo applied", fmt.Sprintf("%v (%d pages)", trusted.RedoApplied, trusted.RedoPages), fmt.Sprintf("%v (%d pages)", scanned.RedoApplied, scanned.RedoPages))
		row("pages scanned", strconv.FormatUint(trusted.PagesScanned, 10), strconv.FormatUint(scanned.PagesScanned, 10))
		row("free pages", strconv.FormatUint(trusted.FreePages, 10), strconv.FormatUint(scanned.FreePages, 10))
		row("free-list time", trusted.FreeListDuration.String(), scanned.FreeListDuration.String())
		row("total open time", trusted.TotalDuration.String(), scanned.TotalDuration.String())
		say("")
		if trusted.FreeListDuration > 0 {
			say("free list: the trusted path was %.0fx faster than the scan", float64(scanned.FreeListDuration)/float64(trusted.FreeListDuration))
		}
		say("free lists equal: %v", same)
	}
	if !same {
		fmt.Fprintln(stderr, "kdbtool demo: the trusted and scanned free lists differ")
		return exitProblems
	}
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func reportJSON(r *pagefile.Report) map[string]any {
	return map[string]any{
		"free_list_path": r.FreeListPath, "reason": r.Reason, "checkpoint_id": r.MetaID.String(),
		"redo_applied": r.RedoApplied, "pages_scanned": r.PagesScanned, "free_pages": r.FreePages,
		"free_list_ms": float64(r.FreeListDuration.Microseconds()) / 1000,
		"duration_ms":  float64(r.TotalDuration.Microseconds()) / 1000,
	}
}

type killInfo struct {
	checkpoints int
	after       time.Duration
}

// runAndKill starts the writing child and SIGKILLs it at a random moment once
// it has built the file and done a few churn checkpoints.
func runAndKill(dir string, sizeMiB int, seed uint64, stderr io.Writer, say func(string, ...any)) (killInfo, error) {
	exe, err := os.Executable()
	if err != nil {
		return killInfo{}, err
	}
	cmd := exec.Command(exe, "demo-child", "-size-mib", strconv.Itoa(sizeMiB), "-seed", strconv.FormatUint(seed, 10), dir)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return killInfo{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return killInfo{}, err
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	churnTarget := 2 + rng.IntN(4)
	sc := bufio.NewScanner(out)
	var info killInfo
	built := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "built":
			built = true
			say("  built in %v", time.Since(start).Round(time.Millisecond))
		case strings.HasPrefix(line, "checkpoint "):
			info.checkpoints++
			if built {
				churnTarget--
			}
		}
		if built && churnTarget <= 0 {
			break
		}
	}
	// Kill at a random moment within the next checkpoint cycle.
	time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
	info.after = time.Since(start).Round(time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return info, err
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	_ = cmd.Wait()
	if !built {
		return info, fmt.Errorf("the writer exited before building the store")
	}
	say("  writer SIGKILLed after %v (%d checkpoints completed)", info.after, info.checkpoints)
	return info, nil
}

func demoOpen(dir string, forceScan bool) (*pagefile.Report, []pagefile.Range, error) {
	f, rep, err := pagefile.Open(dir, pagefile.Options{FS: vfs.OS, ForceScan: forceScan})
	if err != nil {
		return nil, nil, err
	}
	free := f.FreeRanges()
	if err := f.Close(); err != nil {
		return nil, nil, err
	}
	return rep, free, nil
}

func equalRanges(a, b []pagefile.Range) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runDemoChild builds the page file, then churns: frees and allocates pages
// and checkpoints, printing "checkpoint N" after each, until it is killed.
func runDemoChild(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo-child", "DIR", stderr)
	sizeMiB := fs.Int("size-mib", 256, "")
	seed := fs.Uint64("seed", 1, "")
	if code := parseFlags(fs, args); code >= 0 || fs.NArg() != 1 {
		return exitUsage
	}
	f, _, err := pagefile.Open(fs.Arg(0), pagefile.Options{FS: vfs.OS})
	if err != nil {
		fmt.Fprintf(stderr, "demo-child: %v\n", err)
		return exitIO
	}
	rng := rand.New(rand.NewPCG(*seed, 2))
	payload := make([]byte, f.PayloadSize())
	pages := uint64(*sizeMiB) << 20 / uint64(f.PageSize())
	var live []pagefile.PageID
	seq := 0
	write := func(id pagefile.PageID) error {
		binary.LittleEndian.PutUint64(payload, uint64(id))
		binary.LittleEndian.PutUint64(payload[8:], rng.Uint64())
		return f.Write(id, demoPageType, payload)
	}
	checkpoint := func() error {
		if err := f.Checkpoint(pagefile.MetaUpdate{}); err != nil {
			return err
		}
		seq++
		fmt.Fprintf(stdout, "checkpoint %d\n", seq)
		return nil
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "demo-child: %v\n", err)
		return exitIO
	}
	const batch = 8192
	for uint64(len(live)) < pages {
		n := min(batch, int(pages)-len(live))
		first, err := f.AllocateRun(n)
		if err != nil {
			return fail(err)
		}
		for i := 0; i < n; i++ {
			id := first + pagefile.PageID(i)
			if err := write(id); err != nil {
				return fail(err)
			}
			live = append(live, id)
		}
		if err := checkpoint(); err != nil {
			return fail(err)
		}
	}
	fmt.Fprintln(stdout, "built")
	for {
		// Free a random tenth of a batch, allocate and write a batch.
		for i := 0; i < batch/10; i++ {
			j := rng.IntN(len(live))
			if err := f.Free(live[j]); err != nil {
				return fail(err)
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		for i := 0; i < batch/10; i++ {
			id, err := f.Allocate()
			if err != nil {
				return fail(err)
			}
			if err := write(id); err != nil {
				return fail(err)
			}
			live = append(live, id)
		}
		if err := checkpoint(); err != nil {
			return fail(err)
		}
	}
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
