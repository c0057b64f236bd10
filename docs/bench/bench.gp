set terminal svg size 1400,2000 dynamic background rgb 'white' font 'sans,12'
set output 'bench.svg'
set multiplot layout 4,1 title 'fabq bench: fabq against libfabric providers (medians, log scale, lower is better)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set key outside right top
set xtics rotate by 30 right noenhanced
set key noenhanced
set title 'Throughput: time per event'
set ylabel 'ns per event'
set yrange [1:*]
plot 'bench-throughput.dat' using 2:xtic(1) title columnheader(2) lt 1, 'bench-throughput.dat' using 3 title columnheader(3) lt 2, 'bench-throughput.dat' using 4 title columnheader(4) lt 3, 'bench-throughput.dat' using 5 title columnheader(5) lt 4, 'bench-throughput.dat' using 6 title columnheader(6) lt 5, 'bench-throughput.dat' using 7 title columnheader(7) lt 6
set title 'Wake latency, p50'
set ylabel 'microseconds'
set yrange [0.1:*]
plot 'bench-wake-p50.dat' using 2:xtic(1) title columnheader(2) lt 1, 'bench-wake-p50.dat' using 3 title columnheader(3) lt 2, 'bench-wake-p50.dat' using 4 title columnheader(4) lt 3, 'bench-wake-p50.dat' using 5 title columnheader(5) lt 4, 'bench-wake-p50.dat' using 6 title columnheader(6) lt 5, 'bench-wake-p50.dat' using 7 title columnheader(7) lt 6
set title 'Wake latency, p99'
set ylabel 'microseconds'
set yrange [0.1:*]
plot 'bench-wake-p99.dat' using 2:xtic(1) title columnheader(2) lt 1, 'bench-wake-p99.dat' using 3 title columnheader(3) lt 2, 'bench-wake-p99.dat' using 4 title columnheader(4) lt 3, 'bench-wake-p99.dat' using 5 title columnheader(5) lt 4, 'bench-wake-p99.dat' using 6 title columnheader(6) lt 5, 'bench-wake-p99.dat' using 7 title columnheader(7) lt 6
set title 'MSG one-way latency, p50'
set ylabel 'microseconds'
set yrange [0.1:*]
plot 'bench-msg-latency.dat' using 2:xtic(1) title columnheader(2) lt 1, 'bench-msg-latency.dat' using 3 title columnheader(3) lt 3, 'bench-msg-latency.dat' using 4 title columnheader(4) lt 4
unset multiplot
