from deepedge.cli import main

main()
