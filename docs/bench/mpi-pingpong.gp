set terminal svg size 1200,950 dynamic background rgb 'white' font 'sans,12'
set output 'mpi-pingpong.svg'
set multiplot layout 2,2 title 'MPI ping-pong, 2 ranks: fabq against the alternatives (log-log)'
set logscale xy
set grid
set key left top noenhanced
set xlabel 'message size (bytes)'
set xtics ('8' 8, '64' 64, '1Ki' 1024, '16Ki' 16384, '256Ki' 262144, '4Mi' 4194304)
set xrange [6:6e6]

set title 'Latency, one host (one way, median)'
set ylabel 'microseconds'
plot 'mpi-host.dat' using 1:2 title 'fabq' with linespoints lt 1, 'mpi-host.dat' using 1:3 title 'tcp' with linespoints lt 2, 'mpi-host.dat' using 1:4 title 'vader' with linespoints lt 3, 'mpi-host.dat' using 1:5 title 'tcp-btl' with linespoints lt 4
set title 'Bandwidth, one host (ping-pong)'
set ylabel 'MB/s'
plot 'mpi-host.dat' using 1:6 title 'fabq' with linespoints lt 1, 'mpi-host.dat' using 1:7 title 'tcp' with linespoints lt 2, 'mpi-host.dat' using 1:8 title 'vader' with linespoints lt 3, 'mpi-host.dat' using 1:9 title 'tcp-btl' with linespoints lt 4
set title 'Latency, 2 network namespaces (one way, median)'
set ylabel 'microseconds'
plot 'mpi-netns.dat' using 1:2 title 'fabq' with linespoints lt 1, 'mpi-netns.dat' using 1:3 title 'tcp' with linespoints lt 2, 'mpi-netns.dat' using 1:4 title 'tcp-btl' with linespoints lt 3
set title 'Bandwidth, 2 network namespaces (ping-pong)'
set ylabel 'MB/s'
plot 'mpi-netns.dat' using 1:5 title 'fabq' with linespoints lt 1, 'mpi-netns.dat' using 1:6 title 'tcp' with linespoints lt 2, 'mpi-netns.dat' using 1:7 title 'tcp-btl' with linespoints lt 3
unset multiplot
