// Command plotbench draws results/mqtt.png from BenchmarkMQTT's output:
//
//	go run ./internal/plotbench results/bench.txt results/mqtt.png
//
// One bar group per measure (QoS 1 msgs/s with 1 and 16 publishers, the
// broker's CPU time per message with 16, restart-ms), one bar per hook: the mean of the runs, a line from the
// lowest to the highest run.
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	line   = regexp.MustCompile(`^BenchmarkMQTT/(?:publish/hook=([\w-]+)/pubs=(\d+)|restart)-\d+\s+\d+\s`)
	metric = regexp.MustCompile(`([\d.]+) (msgs/s|broker-cpu-us/msg|([\w-]+)-restart-ms)\b`)
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: plotbench bench.txt out.png")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vals := map[string]map[string][]float64{} // measure → hook → values
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, mm := range metric.FindAllStringSubmatch(sc.Text(), -1) {
			var measure string
			hook := m[1]
			switch {
			case mm[3] != "":
				measure, hook = "restart (ms)", mm[3]
			case mm[2] == "msgs/s":
				measure = "QoS 1 msgs/s, " + m[2] + " publisher(s)"
			case mm[2] == "broker-cpu-us/msg":
				if m[2] != "16" {
					continue
				}
				measure = "broker CPU µs per message, 16 publishers"
			}
			if hook == "" {
				continue
			}
			v, _ := strconv.ParseFloat(mm[1], 64)
			if vals[measure] == nil {
				vals[measure] = map[string][]float64{}
			}
			vals[measure][hook] = append(vals[measure][hook], v)
		}
	}
	measures := make([]string, 0, len(vals))
	for k := range vals {
		measures = append(measures, k)
	}
	sort.Strings(measures)
	hooks := []string{"kdb", "pebble-sync", "bolt", "pebble"}
	label := map[string]string{ // which setting is durable (README: "What an acknowledgement means")
		"kdb":         "kdb, durable",
		"pebble-sync": "pebble Sync, durable",
		"bolt":        "bolt, durable",
		"pebble":      "pebble NoSync, not durable",
	}
	img := vgimg.New(vg.Length(len(measures))*4.5*vg.Inch, 4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(measures), PadX: vg.Millimeter * 4}
	for i, ms := range measures {
		p := plot.New()
		p.Title.Text = ms
		w := vg.Points(14)
		top := 0.0
		for j, h := range hooks {
			xs := vals[ms][h]
			if len(xs) == 0 {
				continue
			}
			mean, lo, hi := 0.0, xs[0], xs[0]
			for _, x := range xs {
				mean += x
				lo, hi = min(lo, x), max(hi, x)
			}
			mean /= float64(len(xs))
			bars, err := plotter.NewBarChart(plotter.Values{mean}, w)
			if err != nil {
				panic(err)
			}
			bars.Color = plotutil.Color(j)
			bars.XMin = float64(j)
			p.Add(bars)
			// The range of the runs, at the bar's centre.
			if l, err := plotter.NewLine(plotter.XYs{{X: float64(j), Y: lo}, {X: float64(j), Y: hi}}); err == nil {
				l.Width = vg.Points(2)
				p.Add(l)
			}
			p.Legend.Add(fmt.Sprintf("%s: %.0f-%.0f", label[h], lo, hi), bars)
			top = max(top, hi)
		}
		p.Y.Min, p.Y.Max = 0, top*1.6 // room for the legend above the bars
		p.Legend.Top = true
		p.Legend.Left = true
		p.NominalX(hooks...)
		p.Draw(tiles.At(dc, i, 0))
	}
	out, err := os.Create(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer out.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
