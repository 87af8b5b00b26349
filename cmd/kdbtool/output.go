package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitIO
	}
	return exitOK
}

// failed prints the error of subcommand name that stopped it before its
// report: one line on stderr and, with --json (asJSON), one JSON document
// on stdout, {"error": what, "corrupt": isCorrupt(err)}, so that a script
// that parses stdout always gets one. what is err's message after prefix
// ("close: ", or ""). It returns code, the exit code.
func failed(stdout, stderr io.Writer, name string, asJSON bool, prefix string, err error, code int) int {
	fmt.Fprintf(stderr, "kdbtool %s: %s%s\n", name, prefix, errLine(err))
	if asJSON {
		writeJSON(stdout, errorDoc(prefix, err))
	}
	return code
}

// errorDoc is the JSON document of an error that stopped a subcommand
// before its report (failed): {"error": prefix + err's message, "corrupt":
// isCorrupt(err)}.
func errorDoc(prefix string, err error) map[string]any {
	return map[string]any{"error": prefix + err.Error(), "corrupt": isCorrupt(err)}
}

// jsonSet reports whether fs's subcommand has a --json flag and it is set.
func jsonSet(fs *flag.FlagSet) bool {
	f := fs.Lookup("json")
	return f != nil && f.Value.String() == "true"
}

// argsFailed ends fs's subcommand when its arguments are refused after its
// flags were parsed (a missing or empty DIR, a flag's bad value): the
// message and the usage are on stderr already (oneArg, pathArg, usageErr);
// with --json it prints err's JSON document (errorDoc) on stdout too, as
// failed does, so that a script that parses stdout gets one. It returns
// exitUsage.
func argsFailed(fs *flag.FlagSet, stdout io.Writer, err error) int {
	if jsonSet(fs) {
		writeJSON(stdout, errorDoc("", err))
	}
	return exitUsage
}

// isCorrupt reports whether err is about damaged bytes on disk (exit 1)
// rather than an I/O or environment error (exit 3).
func isCorrupt(err error) bool {
	return errors.Is(err, kdb.ErrCorrupt) || errors.Is(err, pagefile.ErrCorrupt) ||
		errors.Is(err, journal.ErrCorrupt) || errors.Is(err, journal.ErrTornTail) ||
		errors.Is(err, kdb.ErrVersionMismatch) || errors.Is(err, pagefile.ErrVersionMismatch) ||
		errors.Is(err, journal.ErrVersionMismatch)
}

// exitFor maps an error to an exit code: 1 for corruption, 3 otherwise.
func exitFor(err error) int {
	if isCorrupt(err) || errors.Is(err, errUnfinishedImport) {
		return exitProblems
	}
	return exitIO
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress prints a counter on stderr at most every 200ms, and only when
// stderr is a terminal. A nil *progress is valid and prints nothing.
type progress struct {
	w    io.Writer
	what string
	mu   sync.Mutex
	n    uint64
	last time.Time
}

func newProgress(stderr io.Writer, what string) *progress {
	if !isTerminal(stderr) {
		return nil
	}
	return &progress{w: stderr, what: what}
}

// add counts n more items.
func (p *progress) add(n uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if now := time.Now(); now.Sub(p.last) >= 200*time.Millisecond {
		p.last = now
		fmt.Fprintf(p.w, "\r%s: %d", p.what, p.n)
	}
}

// done clears the progress line.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r%s: %d done\n", p.what, p.n)
}

// oneArg parses the single DIR argument of a subcommand (not empty: see
// pathArg). A usage error is said on fs's output (the usage) and returned
// (for argsFailed).
func oneArg(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", argCountErr(fs, fmt.Errorf("want one DIR argument, got %d", fs.NArg()))
	}
	if err := pathArg(fs, "DIR", fs.Arg(0)); err != nil {
		return "", err
	}
	return vfs.CleanPath(fs.Arg(0)), nil
}

// nArgs checks that fs's subcommand got the positional arguments names
// (DIR, FILE), in that order: another count is a usage error, said on fs's
// output (the usage) and returned (for argsFailed).
func nArgs(fs *flag.FlagSet, names ...string) error {
	if fs.NArg() != len(names) {
		return argCountErr(fs, fmt.Errorf("want %s, got %d arguments", strings.Join(names, " "), fs.NArg()))
	}
	return nil
}

// argCountErr says err, a wrong count of positional arguments, on fs's
// output (the reason, then the usage) and returns it (for argsFailed).
func argCountErr(fs *flag.FlagSet, err error) error {
	fmt.Fprintf(fs.Output(), "kdbtool %s: %s\n", fs.Name(), err)
	fs.Usage()
	return err
}

// pathArg returns nil if p, the positional argument what (DIR, FILE) of
// fs's subcommand, is a path. An empty one is a usage error, said on fs's
// output (with the usage) and returned: the file system would take it for
// the current directory.
func pathArg(fs *flag.FlagSet, what, p string) error {
	if p != "" {
		return nil
	}
	hint := "name a file"
	if what == "DIR" {
		hint = "name a directory (. for the current one)"
	}
	err := fmt.Errorf("%s is empty: %s", what, hint)
	fmt.Fprintf(fs.Output(), "kdbtool %s: %s\n", fs.Name(), err)
	fs.Usage()
	return err
}

// usageErr prints a usage error of fs's subcommand about one flag's value
// and the subcommand's usage, and with --json its JSON document on stdout
// (argsFailed); it returns exitUsage.
func usageErr(fs *flag.FlagSet, stdout io.Writer, format string, a ...any) int {
	err := fmt.Errorf(format, a...)
	fmt.Fprintf(fs.Output(), "kdbtool %s: %s\n", fs.Name(), err)
	fs.Usage()
	return argsFailed(fs, stdout, err)
}

// oneLine returns s as one line of human output: errors.Join (the page
// file's "no intact meta slot" joins one error per slot) separates its
// errors by newlines, which become "; ".
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	return strings.Join(lines, "; ")
}

// errLine is err's message on one line (oneLine), for the human output.
func errLine(err error) string { return oneLine(errString(err)) }

// storeExists reports whether dir holds a store (db.data), so that the
// read-only subcommands never create one. A directory that lost its
// db.data but still holds what only a store leaves (journal segments,
// db.free, db.redo) is ErrCorrupt (exit 1), with kdb.Open's explanation.
//
// A db.data that is not a regular file (a directory, a FIFO, a device) is
// a damaged store too, ErrCorrupt (exit 1) for every subcommand, and is
// never opened (a FIFO's open would block).
func storeExists(dir string) error {
	if err := unfinishedImport(dir); err != nil {
		return err
	}
	st, err := os.Stat(filepath.Join(dir, "db.data"))
	if err == nil {
		return dataFileKind(dir, st)
	}
	if errors.Is(err, os.ErrNotExist) {
		// A read-only Open creates and writes nothing; it refuses such a
		// directory with ErrCorrupt.
		db, oerr := kdb.Open(dir, &kdb.Options{ReadOnly: true})
		if oerr == nil {
			return db.Close() // db.data appeared meanwhile
		}
		if errors.Is(oerr, kdb.ErrCorrupt) {
			return oerr
		}
	}
	return fmt.Errorf("%s is not a kdb store: %w", dir, err)
}

// unfinishedImport refuses dir if it holds importMark: the store a killed
// or failed kdbtool import left, part of the snapshot at most. Every
// command checks it first, stress too (which otherwise makes a store in a
// directory that has none).
func unfinishedImport(dir string) error {
	if _, err := os.Lstat(filepath.Join(dir, importMark)); err == nil {
		return fmt.Errorf("%s is %w (it holds %s): the store kdbtool import was building when it was killed or failed, part of the snapshot at most; delete the directory and import again",
			dir, errUnfinishedImport, importMark)
	}
	return nil
}

// dataFileKind returns nil if st, the Stat of dir's db.data, is a regular
// file, else an ErrCorrupt that says what it is.
func dataFileKind(dir string, st os.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%w: %s is %s, not a regular file; move it aside, then kdbtool repair says whether db.data can be rebuilt from the journal",
		kdb.ErrCorrupt, filepath.Join(dir, "db.data"), vfs.FileKind(st.Mode()))
}

// dataLost reports whether dir is a store that lost its db.data (storeExists
// says ErrCorrupt, and db.data does not exist), and the explanation.
func dataLost(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "db.data")); !errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	err := storeExists(dir)
	return errors.Is(err, kdb.ErrCorrupt), err
}

func errIsNotFound(err error) bool { return errors.Is(err, kdb.ErrNotFound) }
