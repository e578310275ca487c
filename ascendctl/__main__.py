from ascendctl.cli import main

main()
