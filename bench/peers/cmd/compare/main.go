// Command compare runs BenchmarkPeers (or parses saved `go test -bench`
// output) and writes a markdown table of the figures with kdb's ratio to
// each peer, and a PNG plot of the time to open after a crash against the
// store size for each engine.
//
// It also checks the targets (ratios in the same run) and says for
// each whether it is met; for write-16's (2x Pebble) also whether 2x Pebble
// was within the disk's bound for 16 writers (write-16-bound, measured in
// the same run), which no engine can pass.
//
// From bench/peers:
//
//	go run ./cmd/compare                       # write/get + 1 GiB open
//	go run ./cmd/compare -big                  # also the 4 GiB open (KDB_BENCH_BIG=1)
//	go run ./cmd/compare -in results/bench.txt # only parse saved output
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// engines are the table's columns; kdb-scan runs only the open-after-crash
// workloads.
var engines = []string{"kdb", "kdb-scan", "bbolt", "bbolt-nofreelistsync", "pebble"}

var workloads = []string{"write-1", "write-16", boundWorkload, "get", "open-after-crash-1GiB", "open-after-crash-4GiB"}

// boundWorkload is no engine's: the disk's bound for 16 writers of durable
// 1 KiB puts (16 × the rate of fdatasynced appends of 16 KiB plus framing),
// one result under the pseudo-engine diskEngine, measured in the same run
// right after the write-16 engines.
const (
	boundWorkload = "write-16-bound"
	diskEngine    = "disk"
)

// result is one benchmark line.
type result struct {
	n       int
	metrics map[string]float64 // unit -> value ("ns/op", "ops/s", "MiB")
	// rounds holds, in the median result parse returns, every line of the
	// same workload and engine by round ("R.I": the I-th line in round R;
	// R is 0 in output without "# round:" markers), so that a ratio
	// compares engines measured side by side in one round.
	rounds map[string]result
}

func main() {
	in := flag.String("in", "", "parse this saved `go test -bench` output instead of running the benchmarks")
	out := flag.String("out", "results", "directory for RESULTS.md, open-after-crash.png and bench.txt")
	writeTime := flag.String("writetime", "2000x", "-benchtime for write-1, write-16 and write-16-bound")
	getTime := flag.String("gettime", "1s", "-benchtime for get")
	openTime := flag.String("opentime", "3x", "-benchtime for open-after-crash")
	rounds := flag.Int("rounds", 1, "run every benchmark command this many times, in rounds (each round runs all of them); the table shows each figure's median over the rounds (use an odd number)")
	big := flag.Bool("big", os.Getenv("KDB_BENCH_BIG") == "1", "also run open-after-crash-4GiB (sets KDB_BENCH_BIG=1; builds about 19 GiB of stores once)")
	flag.Parse()

	var raw []byte
	var cmds []string
	if *in != "" {
		b, err := os.ReadFile(*in)
		if err != nil {
			log.Fatal(err)
		}
		raw = b
		// The commands that produced the output, as recorded in it.
		for _, l := range strings.Split(string(b), "\n") {
			if c, ok := strings.CutPrefix(l, "# cmd: "); ok {
				cmds = append(cmds, c)
			}
		}
		cmds = append(cmds, "# (table re-rendered from "+*in+" by go run ./cmd/compare -in "+*in+")")
	} else {
		runs := [][2]string{
			{"BenchmarkPeers/workload=(write-1|write-16|write-16-bound)/", *writeTime},
			{"BenchmarkPeers/workload=get/", *getTime},
			{"BenchmarkPeers/workload=open-after-crash", *openTime},
		}
		env := "KDB_BENCH_BIG=0 "
		if *big {
			env = "KDB_BENCH_BIG=1 "
		}
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "# kdb: %s\n", kdbCommit())
		fmt.Fprintf(&buf, "# loadavg before: %s\n", loadavg())
		for round := 1; round <= *rounds; round++ {
			for _, r := range runs {
				args := []string{"test", "-run", "^$", "-bench", r[0], "-benchtime", r[1], "-timeout", "3h", "."}
				c := env + "go " + strings.Join(args, " ")
				if round == 1 {
					cmds = append(cmds, c)
				}
				log.Printf("round %d/%d: running %s", round, *rounds, c)
				fmt.Fprintf(&buf, "# cmd: %s\n# round: %d of %d\n", c, round, *rounds)
				cmd := exec.Command("go", args...)
				cmd.Env = append(os.Environ(), strings.TrimSpace(env))
				cmd.Stdout = io.MultiWriter(&buf, os.Stdout)
				cmd.Stderr = os.Stderr
				if err := cmd.Run(); err != nil {
					// A failed benchmark (say kdb did not trust db.free)
					// is a result too: keep going, RESULTS.md lists it.
					log.Printf("go test: %v", err)
					fmt.Fprintf(&buf, "# failed: %v\n", err)
				}
			}
		}
		if *rounds > 1 {
			cmds = append(cmds, fmt.Sprintf("# each of these %d times, in rounds (go run ./cmd/compare -rounds %d); figures are medians over the rounds", *rounds, *rounds))
		}
		fmt.Fprintf(&buf, "# loadavg after: %s\n", loadavg())
		raw = buf.Bytes()
		if err := os.MkdirAll(*out, 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(*out+"/bench.txt", raw, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	res := parse(raw)
	if len(res) == 0 {
		log.Fatal("no BenchmarkPeers results found")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	flags := "-in " + *in
	if *in == "" {
		flags = ""
		if *big {
			flags = "-big"
		}
		if *rounds > 1 {
			flags = strings.TrimSpace(fmt.Sprintf("%s -rounds %d", flags, *rounds))
		}
	}
	md := table(res, cmds, raw, flags)
	if err := os.WriteFile(*out+"/RESULTS.md", []byte(md), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := plotOpen(res, *out+"/open-after-crash.png"); err != nil {
		log.Printf("no plot: %v", err)
	}
	fmt.Print(md)
}

var lineRE = regexp.MustCompile(`^BenchmarkPeers/workload=([^/]+)/engine=([a-z-]+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

var roundRE = regexp.MustCompile(`^# round: (\d+) of \d+$`)

// parse returns results by workload then engine; repeated lines (rounds,
// -count) are reduced to their median, which keeps them all in rounds.
func parse(raw []byte) map[string]map[string]result {
	all := map[string]map[string][]result{}
	round := 0
	seen := map[string]int{} // lines of a workload and engine in this round
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if m := roundRE.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
			round, _ = strconv.Atoi(m[1])
			clear(seen)
			continue
		}
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[3])
		r := result{n: n, metrics: map[string]float64{}}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				r.metrics[f[i+1]] = v
			}
		}
		if all[m[1]] == nil {
			all[m[1]] = map[string][]result{}
		}
		we := m[1] + " " + m[2]
		seen[we]++
		r.rounds = map[string]result{fmt.Sprintf("%d.%d", round, seen[we]): {n: r.n, metrics: r.metrics}}
		all[m[1]][m[2]] = append(all[m[1]][m[2]], r)
	}
	out := map[string]map[string]result{}
	for w, es := range all {
		out[w] = map[string]result{}
		for e, rs := range es {
			byRound := map[string]result{}
			for _, r := range rs {
				for k, v := range r.rounds {
					byRound[k] = v
				}
			}
			sort.Slice(rs, func(i, j int) bool { return rs[i].metrics["ns/op"] < rs[j].metrics["ns/op"] })
			med := rs[len(rs)/2]
			med.rounds = byRound
			out[w][e] = med
		}
	}
	return out
}

// median returns the middle of vs (for an even count the lower middle one:
// for a ratio, kdb's worse). It sorts vs.
func median(vs []float64) float64 {
	sort.Float64s(vs)
	return vs[(len(vs)-1)/2]
}

func isWrite(w string) bool { return strings.HasPrefix(w, "write-") }

// figure returns the headline figure of a result and its text.
func figure(w string, r result) (float64, string) {
	switch {
	case isWrite(w):
		v := r.metrics["ops/s"]
		return v, fmt.Sprintf("%s ops/s", human(v))
	case w == "get":
		v := r.metrics["ns/op"]
		return v, fmt.Sprintf("%s µs", human(v/1e3))
	default:
		v := r.metrics["ns/op"]
		return v, fmt.Sprintf("%s ms", human(v/1e6))
	}
}

func human(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// ratio is how many times better kdb is than engine e on workload w
// (writes: kdb ops/s ÷ e ops/s; times: e time ÷ kdb time): the median of
// the ratios within each round that measured both, never one engine's
// round against another's (the medians of the two engines' figures can
// come from different rounds, and their ratio from none).
func ratio(res map[string]map[string]result, w, e string) (float64, bool) {
	k, kok := res[w]["kdb"]
	r, ok := res[w][e]
	if !kok || !ok {
		return 0, false
	}
	var rs []float64
	for key, kr := range k.rounds {
		er, ok := r.rounds[key]
		if !ok {
			continue
		}
		kv, _ := figure(w, kr)
		ev, _ := figure(w, er)
		if kv == 0 || ev == 0 {
			continue
		}
		if isWrite(w) {
			rs = append(rs, kv/ev)
		} else {
			rs = append(rs, ev/kv)
		}
	}
	if len(rs) == 0 {
		return 0, false
	}
	return median(rs), true
}

// A target of the issue: kdb's ratio to peer on workload at least min.
type target struct {
	text     string
	workload string
	peer     string
	min      float64
	// show renders the measured ratio r in the target's own terms.
	show func(r float64) string
	// more, if set, adds to the measured text what else res says about
	// the target (write-16: the disk's bound).
	more func(res map[string]map[string]result) string
}

var targets = []target{
	{"open after a crash, 4 GiB: kdb (trusted free list) at least 100x faster than kdb forced to scan",
		"open-after-crash-4GiB", "kdb-scan", 100,
		func(r float64) string { return fmt.Sprintf("kdb-scan ÷ kdb time = %.1fx (want ≥ 100x)", r) }, nil},
	{"open after a crash, 4 GiB: kdb no slower than bbolt (free list synced)",
		"open-after-crash-4GiB", "bbolt", 1,
		func(r float64) string { return fmt.Sprintf("kdb ÷ bbolt time = %.3g (want ≤ 1)", 1/r) }, nil},
	{"durable 1 KiB puts, 1 writer: kdb at least 5x bbolt (free list synced)",
		"write-1", "bbolt", 5,
		func(r float64) string { return fmt.Sprintf("kdb ÷ bbolt ops/s = %.2fx (want ≥ 5x)", r) }, nil},
	// The durable write path's own targets for the two write workloads
	// (write-16's, 2x Pebble, is the row after this one).
	{"durable 1 KiB puts, 1 writer: kdb at least 2x bbolt (free list synced; the durable write path's target)",
		"write-1", "bbolt", 2,
		func(r float64) string { return fmt.Sprintf("kdb ÷ bbolt ops/s = %.2fx (want ≥ 2x)", r) }, nil},
	{"durable 1 KiB puts, 16 writers: kdb at least 2x Pebble",
		"write-16", "pebble", 2,
		func(r float64) string { return fmt.Sprintf("kdb ÷ pebble ops/s = %.2fx (want ≥ 2x)", r) },
		write16Bound},
	{"random Get of 100-byte values: kdb within 1.2x of bbolt's time",
		"get", "bbolt", 1 / 1.2,
		func(r float64) string { return fmt.Sprintf("kdb ÷ bbolt time = %.2f (want ≤ 1.2)", 1/r) }, nil},
}

// write16Bound says whether 2x Pebble's write-16 rate was within the
// disk's bound for 16 writers (write-16-bound) in the run, and kdb's
// fraction of the bound. An engine's 16 writers put at most 16 puts in one
// fdatasync, so none can pass the bound: when 2x Pebble is above it the
// target cannot be met in that run.
func write16Bound(res map[string]map[string]result) string {
	bounds := res[boundWorkload][diskEngine].rounds
	if len(bounds) == 0 {
		return "; the disk's bound for 16 writers not measured (no write-16-bound in the run)"
	}
	// Each round's bound against the same round's engines.
	var above int
	var fracs []float64
	var one [3]float64
	for key, b := range bounds {
		bound := b.metrics["ops/s"]
		pebble := res["write-16"]["pebble"].rounds[key].metrics["ops/s"]
		kdb := res["write-16"]["kdb"].rounds[key].metrics["ops/s"]
		if bound == 0 || pebble == 0 || kdb == 0 {
			continue
		}
		if 2*pebble > bound {
			above++
		}
		fracs = append(fracs, kdb/bound)
		one = [3]float64{bound, pebble, kdb}
	}
	switch n := len(fracs); {
	case n == 0:
		return ""
	case n > 1:
		return fmt.Sprintf("; 2x Pebble above the disk's bound for 16 writers (16 × 16 KiB appends fdatasynced per second, write-16-bound) in %d of %d rounds; kdb = %.2f of the bound (median of the rounds)",
			above, n, median(fracs))
	}
	bound, pebble, kdb := one[0], one[1], one[2]
	where, verdict := "below", "reachable"
	switch twice := 2 * pebble; {
	case twice > bound:
		where, verdict = "above", "unreachable in this run"
	case twice == bound:
		where = "at"
	}
	return fmt.Sprintf("; 2x Pebble = %.0f ops/s, %s the disk's bound for 16 writers (16 × 16 KiB appends fdatasynced per second, write-16-bound = %.0f ops/s): %s; kdb = %.2f of the bound",
		2*pebble, where, bound, verdict, kdb/bound)
}

// targetTable renders the targets, met or missed, from res.
func targetTable(res map[string]map[string]result) string {
	var b strings.Builder
	b.WriteString("| target | measured (same run) | |\n|---|---|---|\n")
	for _, t := range targets {
		r, ok := ratio(res, t.workload, t.peer)
		shown := ""
		if ok {
			shown = t.show(r)
			if t.more != nil {
				shown += t.more(res)
			}
		}
		switch {
		case ok && r >= t.min:
			fmt.Fprintf(&b, "| %s | %s | **met** |\n", t.text, shown)
		case ok:
			fmt.Fprintf(&b, "| %s | %s | **missed** |\n", t.text, shown)
		default:
			note := "not run"
			if small := strings.Replace(t.workload, "4GiB", "1GiB", 1); small != t.workload {
				note = "not run (`go run ./cmd/compare -big`)"
				if r1, ok1 := ratio(res, small, t.peer); ok1 {
					note += "; at 1 GiB: " + t.show(r1)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | – |\n", t.text, note)
		}
	}
	b.WriteString("| checkpoint cost with the same dirty pages, 256 MiB vs 4 GiB: at most 1.3x | not measured here (`bench/` BenchmarkCheckpoint in the root module) | – |\n")
	return b.String()
}

// breakdown renders where kdb's open after a crash spends its time (the
// RecoveryReport phases, averaged per open), if the output has them.
func breakdown(res map[string]map[string]result) string {
	phases := []string{"pagefile-ms/op", "journal-ms/op", "replay-ms/op", "recovery-ms/op", "checkpoint-ms/op"}
	var b strings.Builder
	for _, w := range workloads {
		for _, e := range []string{"kdb", "kdb-scan"} {
			r, ok := res[w][e]
			if !ok {
				continue
			}
			if _, ok := r.metrics["recovery-ms/op"]; !ok {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("| workload | engine | open (timed) | page file + free list | journal open | replay | recovery total (until Open serves) | recovery checkpoint (after Open returned, not timed) | pages scanned |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
			}
			fmt.Fprintf(&b, "| %s | %s | %s ms |", w, e, human(r.metrics["ns/op"]/1e6))
			for _, p := range phases {
				fmt.Fprintf(&b, " %s ms |", human(r.metrics[p]))
			}
			fmt.Fprintf(&b, " %.0f |\n", r.metrics["pages-scanned/op"])
		}
	}
	return b.String()
}

// failures returns the "--- FAIL" lines of the raw output with the
// indented messages that follow each.
func failures(raw []byte) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(l, "--- FAIL"):
			in = true
		case in && strings.HasPrefix(l, " "):
		default:
			in = false
		}
		if in {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// header returns the value of a "# key: value" line of the raw output.
func header(raw []byte, key string) string {
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "# "+key+": "); ok {
			return v
		}
	}
	return ""
}

func table(res map[string]map[string]result, cmds []string, raw []byte, flags string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kdb against peer engines\n\nGenerated by `go run ./cmd/compare %s` (in bench/peers) on %s.\n\n", flags, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	var about []string
	if c := header(raw, "kdb"); c != "" {
		about = append(about, fmt.Sprintf("kdb measured at commit %s.", c))
	}
	if l := header(raw, "loadavg before"); l != "" {
		about = append(about, fmt.Sprintf("Machine load (load average over 1, 5, 15 min; I/O pressure) before the run: %s; after: %s.", l, header(raw, "loadavg after")))
	}
	if len(about) > 0 {
		b.WriteString(strings.Join(about, " ") + "\n\n")
	}
	b.WriteString("Benchmark commands:\n\n```sh\n")
	for _, c := range cmds {
		b.WriteString(c + "\n")
	}
	b.WriteString("```\n\n## Targets\n\n")
	b.WriteString(targetTable(res))
	b.WriteString("\n## Figures\n\n")
	b.WriteString("Writes in durable 1 KiB puts per second (higher is better); get and open in time per operation (lower is better). ")
	b.WriteString("A ratio `kdb vs E` is how many times better kdb is than E (writes: kdb ops/s ÷ E ops/s; get, open: E time ÷ kdb time); below 1 means kdb is worse. ")
	b.WriteString("`kdb-scan` is the same crashed kdb store opened with `ForceFreeListScan` (only the open-after-crash workloads).")
	if _, ok := res[boundWorkload]; ok {
		b.WriteString(" `write-16-bound` is no engine but the disk, measured right after the write-16 engines: 16 × the rate of 17152-byte appends (16 KiB of puts + 16 × 48 bytes of framing), each fdatasynced, into zero-filled blocks; 16 writers put at most 16 puts in one fdatasync, so no engine's write-16 can pass it.")
	}
	b.WriteString("\n\n")
	b.WriteString("| workload |")
	for _, e := range engines {
		fmt.Fprintf(&b, " %s |", e)
	}
	for _, e := range engines[1:] {
		fmt.Fprintf(&b, " kdb vs %s |", e)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---:|", 2*len(engines)-1))
	b.WriteString("\n")
	for _, w := range workloads {
		es, ok := res[w]
		if !ok {
			continue
		}
		if r, ok := es[diskEngine]; ok {
			// No engine's figure: the disk's bound, in the first column,
			// said to be the disk's.
			_, s := figure(w, r)
			fmt.Fprintf(&b, "| %s | disk: %s (%s µs/fsync) |", w, s, human(r.metrics["µs/fsync"]))
			b.WriteString(strings.Repeat(" – |", 2*len(engines)-2))
			b.WriteString("\n")
			continue
		}
		fmt.Fprintf(&b, "| %s |", w)
		for _, e := range engines {
			if r, ok := es[e]; ok {
				_, s := figure(w, r)
				if mib, ok := r.metrics["MiB"]; ok {
					s += fmt.Sprintf(" (%.0f MiB)", mib)
				}
				fmt.Fprintf(&b, " %s |", s)
			} else {
				b.WriteString(" – |")
			}
		}
		for _, e := range engines[1:] {
			if r, ok := ratio(res, w, e); ok {
				fmt.Fprintf(&b, " %.2fx |", r)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nHow it is measured (details in ../README.md): every engine fsyncs each measured put (kdb SyncAlways, bbolt one Update per put, Pebble Sync); ")
	b.WriteString("the crash before each open-after-crash iteration is a child process SIGKILLed during durable 1 KiB puts (a process crash: the page cache survives); ")
	b.WriteString("the size in parentheses is the store on disk (every engine holds the same pairs: 16-byte keys, 16 KiB values). ")
	b.WriteString("The benchmark fails unless kdb used its trusted free list (0 pages scanned) and kdb-scan scanned pages. ")
	runs := "One run"
	if _, n, ok := strings.Cut(header(raw, "round"), " of "); ok && n != "1" {
		runs = "Each figure is the median of " + n + " rounds (every round runs every command above; for an even count, the slower middle one), and each ratio the median of the rounds' own ratios (kdb against the peer in the same round; for an even count, kdb's worse middle one), so a ratio need not be the quotient of the two medians shown"
	}
	b.WriteString(runs + ", engines alternating within each workload; the machine (2 vCPUs, virtual disk) is shared with other jobs, so figures move by tens of percent between runs.\n")
	if f := failures(raw); f != "" {
		b.WriteString("\n## Failed benchmarks\n\nThese benchmarks failed; their figures are missing above.\n\n```\n" + f + "```\n")
	}
	if bd := breakdown(res); bd != "" {
		b.WriteString("\n## Where kdb's open after a crash spends its time\n\n")
		b.WriteString("From `DB.Recovery()`, averaged over the timed opens; the timed open also includes what recovery does not report (locking, opening the trees).\n\n")
		b.WriteString(bd)
	}
	b.WriteString("\n![time to open after a crash against store size](open-after-crash.png)\n")
	b.WriteString("\n<details><summary>raw output</summary>\n\n```\n")
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "Benchmark") && strings.Contains(l, "ns/op") || strings.HasPrefix(l, "cpu:") || strings.HasPrefix(l, "goos:") || strings.HasPrefix(l, "# ") {
			b.WriteString(l + "\n")
		}
	}
	b.WriteString("```\n\n</details>\n")
	return b.String()
}

// kdbCommit is the commit of the kdb tree being measured.
func kdbCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	c := strings.TrimSpace(string(out))
	// Uncommitted changes to kdb itself (results and README aside).
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", "../..", ":!../../README.md", ":!results").Output()
	if err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// loadavg is the machine's load: the load averages over 1, 5 and 15
// minutes, and the share of time some task waited for I/O over the last
// 60 s (Linux pressure stall information), which says how much the other
// jobs on the machine were using the disk.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	s := strings.Join(f[:3], " ")
	if p, err := os.ReadFile("/proc/pressure/io"); err == nil {
		for _, w := range strings.Fields(string(p)) {
			if v, ok := strings.CutPrefix(w, "avg60="); ok {
				s += ", I/O stalled " + v + "% of the last minute"
				break
			}
		}
	}
	return s
}

// plotOpen plots open-after-crash time (ms) against store size (GiB as
// measured on disk) per engine.
func plotOpen(res map[string]map[string]result, path string) error {
	p := plot.New()
	p.Title.Text = "Time to open after a crash"
	p.X.Label.Text = "store size on disk (GiB)"
	p.Y.Label.Text = "open time (ms, log scale)"
	var args []any
	for _, e := range engines {
		var pts plotter.XYs
		for _, w := range workloads {
			if !strings.HasPrefix(w, "open-after-crash-") {
				continue
			}
			r, ok := res[w][e]
			if !ok {
				continue
			}
			size := r.metrics["MiB"] / 1024
			if size == 0 {
				size, _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(w, "open-after-crash-"), "GiB"), 64)
			}
			pts = append(pts, plotter.XY{X: size, Y: r.metrics["ns/op"] / 1e6})
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(math.Copysign(1, a.X-b.X)) })
		args = append(args, e, pts)
	}
	if len(args) == 0 {
		return fmt.Errorf("no open-after-crash results to plot")
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(12) // clear of the Y tick labels
	p.X.Min = 0
	p.X.Max = math.Ceil(p.X.Max * 1.1)
	var ticks []plot.Tick
	for g := 0.0; g <= p.X.Max; g++ {
		ticks = append(ticks, plot.Tick{Value: g, Label: strconv.FormatFloat(g, 'f', 0, 64)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	// Log scale: the open times span more than three decades.
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(p.Y.Max)))
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
