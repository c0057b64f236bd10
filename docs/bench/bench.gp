set terminal svg size 1400,1500 dynamic background rgb 'white' font 'sans,12'
set output 'bench.svg'
set multiplot layout 3,1 title 'fabq bench: fabq against libfabric providers (medians, log scale, lower is better)'
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
plot for [i=2:7] 'bench-throughput.dat' using i:xtic(1) title columnheader(i)
set title 'Wake latency, p50'
set ylabel 'microseconds'
set yrange [0.1:*]
plot for [i=2:7] 'bench-wake-p50.dat' using i:xtic(1) title columnheader(i)
set title 'Wake latency, p99'
set ylabel 'microseconds'
set yrange [0.1:*]
plot for [i=2:7] 'bench-wake-p99.dat' using i:xtic(1) title columnheader(i)
unset multiplot
