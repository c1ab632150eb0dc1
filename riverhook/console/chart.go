package console

import (
	"context"
	"fmt"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// This file draws a connection's deliveries by outcome over time: bars of
// server-rendered SVG, no script, each bar's numbers in its title and the
// totals in words, the outcomes told apart by pattern as well as colour.

// chart is one chart as the template draws it.
type chart struct {
	ID            string // unique in the page, for its pattern
	Label         string
	Width, Height int
	Bars          []bar
	Total         riverhook.Period
}

type bar struct {
	X, W  int
	Segs  []seg // from the bottom up
	Title string
}

type seg struct {
	Y, H  int
	Class string // seg-delivered, seg-given-up, seg-cancelled
}

const (
	chartWidth  = 480
	chartHeight = 96
)

// charts returns the connection's charts: the last 24 hours by the hour,
// the last 7 days by the day.
func (c *console) charts(ctx context.Context, conn string) ([]chart, error) {
	now := time.Now()
	out := make([]chart, 0, 2)
	for _, spec := range []struct {
		id, label string
		n         int
		step      time.Duration
		format    string
	}{
		{"day", "Last 24 hours, by the hour", 24, time.Hour, "15:04"},
		{"week", "Last 7 days, by the day", 7, 24 * time.Hour, "Mon 2 Jan"},
	} {
		since := now.Add(-time.Duration(spec.n) * spec.step).Truncate(spec.step).Add(spec.step)
		periods, err := riverhook.Outcomes(ctx, c.client, c.db, conn, since, spec.step)
		if err != nil {
			return nil, err
		}
		out = append(out, drawChart(spec.id, spec.label, spec.format, spec.step, periods))
	}
	return out, nil
}

// drawChart lays periods out as stacked bars scaled to the tallest.
func drawChart(id, label, format string, step time.Duration, periods []riverhook.Period) chart {
	ch := chart{ID: id, Label: label, Width: chartWidth, Height: chartHeight}
	most := 1
	for _, p := range periods {
		most = max(most, p.Delivered+p.GivenUp+p.Cancelled)
		ch.Total.Delivered += p.Delivered
		ch.Total.GivenUp += p.GivenUp
		ch.Total.Cancelled += p.Cancelled
	}
	slot := chartWidth / max(len(periods), 1)
	for i, p := range periods {
		b := bar{X: i*slot + 1, W: max(slot-2, 1),
			Title: fmt.Sprintf("%s–%s UTC: %d delivered, %d given up, %d cancelled", p.Start.Format(format),
				p.Start.Add(step).Format(format), p.Delivered, p.GivenUp, p.Cancelled)}
		y := chartHeight
		for _, part := range []struct {
			n     int
			class string
		}{{p.Delivered, "seg-delivered"}, {p.GivenUp, "seg-given-up"}, {p.Cancelled, "seg-cancelled"}} {
			if part.n == 0 {
				continue
			}
			h := max(part.n*(chartHeight-4)/most, 1)
			y -= h
			b.Segs = append(b.Segs, seg{Y: y, H: h, Class: part.class})
		}
		ch.Bars = append(ch.Bars, b)
	}
	return ch
}
