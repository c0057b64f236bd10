set terminal svg size 1400,1000 dynamic background rgb 'white' font 'sans,12'
set output 'bench.svg'
set multiplot layout 2,1 title 'fabq bench: fabq against libfabric providers (medians, log scale, lower is better but for bandwidth)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set key outside right top
set xtics rotate by 30 right noenhanced
set key noenhanced
set title 'One-way latency, p50: MSG, RDM and RMA write ping-pongs'
set ylabel 'microseconds'
set yrange [0.1:*]
plot 'bench-msg-latency.dat' using 2:xtic(1) title columnheader(2) lt 1, 'bench-msg-latency.dat' using 3 title columnheader(3) lt 2, 'bench-msg-latency.dat' using 4 title columnheader(4) lt 3, 'bench-msg-latency.dat' using 5 title columnheader(5) lt 4
set title 'Bandwidth: RDM messages and RMA (higher is better)'
set ylabel 'GB/s'
set yrange [0.001:*]
plot 'bench-rma-bandwidth.dat' using 2:xtic(1) title columnheader(2) lt 1, 'bench-rma-bandwidth.dat' using 3 title columnheader(3) lt 2, 'bench-rma-bandwidth.dat' using 4 title columnheader(4) lt 3, 'bench-rma-bandwidth.dat' using 5 title columnheader(5) lt 4
unset multiplot
