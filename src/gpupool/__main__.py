from gpupool.main import main

main()
